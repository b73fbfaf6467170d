"""Device timing shared by the benchmarks, the example and the development scripts.

Every timed function takes one argument, the index of the input set it runs on, so that
consecutive calls read different operands:

- `input_sets` says how many sets of a given size exceed 3x the L2 cache, so a small shape does
  not measure operands left in L2 by the previous call;
- `median_ms` runs warm-up calls, then a burst of repetitions, each between two CUDA events, all
  queued behind a GPU sleep so the host has enqueued the burst before the GPU reaches it (device
  time, not launch latency); it returns the median per call;
- `interleaved_ms` times several methods in rounds, each round in a rotated order, and gives each
  method the median of its round medians: the clocks drift with power and heat over a run, and
  a method timed right after an idle period gains from it;
- `window_ms` keeps one method busy for seconds, for rates at the power limit;
- `host_us` is the host's cost per call of a launch-bound op.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

import torch

SetFn = Callable[[int], Any]  # input-set index -> result (ignored)

L2_MULTIPLE = 3  # the input sets together exceed this many times the L2 size
DEFAULT_L2_BYTES = 60 * 1024 * 1024
DEFAULT_CLOCK_KHZ = 1_980_000
MIN_SETS, MAX_SETS = 2, 64
WARMUP_CALLS = 5
MIN_REPS, MAX_REPS = 10, 100
BUDGET_MS = 60.0  # timed repetitions stop near this much device time (but never below MIN_REPS)
HOST_LEAD_US_PER_CALL = 100.0  # GPU sleep queued per timed call so the host stays ahead
ROUNDS = 3


def _device(device: Optional[torch.device]) -> torch.device:
    return device if device is not None else torch.device("cuda", torch.cuda.current_device())


def l2_bytes(device: Optional[torch.device] = None) -> int:
    props = torch.cuda.get_device_properties(_device(device))
    return int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def clock_khz(device: Optional[torch.device] = None) -> int:
    props = torch.cuda.get_device_properties(_device(device))
    return int(getattr(props, "clock_rate", 0) or DEFAULT_CLOCK_KHZ)


def input_sets(bytes_per_set: int, device: Optional[torch.device] = None, *,
               budget_bytes: Optional[int] = None, max_sets: int = MAX_SETS) -> int:
    """How many input sets of `bytes_per_set` together exceed L2_MULTIPLE x the L2 size.

    At least MIN_SETS, at most `max_sets`, and no more than fit in `budget_bytes` when given.
    """
    wanted = math.ceil(L2_MULTIPLE * l2_bytes(device) / max(1, bytes_per_set))
    if budget_bytes is not None:
        wanted = min(wanted, budget_bytes // max(1, bytes_per_set))
    return max(MIN_SETS, min(wanted, max_sets))


def burst_ms(fn: SetFn, n_sets: int, calls: int, first: int = 0,
             device: Optional[torch.device] = None) -> list[float]:
    """Device time (ms) of each of `calls` back-to-back calls, input sets first, first+1, ...

    A GPU sleep queued ahead of the burst lets the host enqueue every call (and its events)
    before the GPU starts, so no call waits on the host.
    """
    device = _device(device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
    torch.cuda._sleep(int(clock_khz(device) * 1e-3 * HOST_LEAD_US_PER_CALL * calls))
    for c in range(calls):
        starts[c].record()
        fn((first + c) % n_sets)
        ends[c].record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def median_ms(fn: SetFn, n_sets: int, *, max_reps: int = MAX_REPS, min_reps: int = MIN_REPS,
              warmup: int = WARMUP_CALLS, budget_ms: float = BUDGET_MS,
              device: Optional[torch.device] = None) -> float:
    """Median device time (ms) of one call over rotated input sets, after `warmup` calls.

    The warm-up is timed as a whole to size the burst: as many repetitions as fit in
    `budget_ms`, within [min(min_reps, max_reps), max_reps].
    """
    device = _device(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(max(1, warmup)):
        fn(i % n_sets)
    end.record()
    torch.cuda.synchronize(device)
    per_call_ms = max(start.elapsed_time(end) / max(1, warmup), 1e-3)
    reps = min(max_reps, max(min_reps, math.ceil(budget_ms / per_call_ms)))
    return statistics.median(burst_ms(fn, n_sets, reps, first=warmup, device=device))


def interleaved_ms(fns: Mapping[str, SetFn], n_sets: int, *, rounds: int = ROUNDS,
                   max_reps: int = MAX_REPS, device: Optional[torch.device] = None,
                   errors: Optional[dict[str, str]] = None) -> dict[str, float]:
    """Median device time (ms) per call of each method, timed in rotated rounds.

    Round r times the methods in the order fns[r:] + fns[:r], each with median_ms and
    max_reps // rounds repetitions; a method's figure is the median of its round medians.
    With `errors` given, a method that raises is recorded there (first line of the message)
    and left out of later rounds instead of stopping the others.
    """
    names = list(fns)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            if errors is not None and name in errors:
                continue
            try:
                per_round[name].append(median_ms(fns[name], n_sets, max_reps=max(1, max_reps // rounds),
                                                 device=device))
            except Exception as exc:
                if errors is None:
                    raise
                lines = str(exc).strip().splitlines()
                errors[name] = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:160]
    return {name: statistics.median(times) for name, times in per_round.items()
            if times and (errors is None or name not in errors)}


def window_ms(fn: SetFn, n_sets: int, seconds: float, batch: int = 20,
              device: Optional[torch.device] = None) -> tuple[float, float, float]:
    """Runs fn back to back for about `seconds`: (median ms per call, wall start, wall end).

    Batches of `batch` calls between two events; the median over batches. For sustained rates
    (power limit, clocks under load) rather than the burst figures of median_ms.
    """
    device = _device(device)
    for i in range(WARMUP_CALLS):
        fn(i % n_sets)
    torch.cuda.synchronize(device)
    times = []
    t0 = time.time()
    call = 0
    while time.time() - t0 < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn(call % n_sets)
            call += 1
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / batch)
    return statistics.median(times), t0, time.time()


def capture_graph(fn: Callable[[], Any], warmup: int = 3) -> torch.cuda.CUDAGraph:
    """fn captured as a CUDA graph, after `warmup` calls on a side stream (allocations and lazy
    initialisation happen outside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def host_us(fn: Callable[[], Any], calls: int = 2000, warmup: int = 50,
            device: Optional[torch.device] = None) -> float:
    """Host time (us) per call over `calls` back-to-back calls and one synchronize.

    When each kernel is shorter than the host work that launches it, this is the host's cost
    per call (argument checks, dispatch, launch).
    """
    device = _device(device)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / calls * 1e6


def tops(m: int, n: int, k: int, ms: Optional[float]) -> Optional[float]:
    """2*M*N*K / time in tera-operations per second (None when there is no time)."""
    return None if ms is None or ms <= 0 else 2.0 * m * n * k / (ms * 1e-3) / 1e12


def cuda_kernels(fn: Callable[[], Any]) -> list[tuple[str, float, float]]:
    """The CUDA kernels one call of fn() runs (torch.profiler; copies and fills left out), as
    (name, start us, end us)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))]

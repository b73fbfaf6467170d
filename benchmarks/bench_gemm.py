#!/usr/bin/env python3
"""Benchmark tcgemm INT8 GEMM backends against cuBLASLt, torch._int_mm, bf16 and fp8.

Method: every point uses the "TN" nn.Linear layout, a[M,K] row-major times w.t() with
w a contiguous [N,K] weight; all series run in the same process on the same random
full-range int8 inputs (the bf16/fp8 peers get converted copies).  Several input sets
are allocated so their total size exceeds ~3x the L2 cache and each call uses the next
set, so operands do not stay L2-resident between calls.  Each call is bracketed by CUDA
events; a GPU sleep queued first lets the host enqueue all calls ahead of the GPU, so
only device time is measured.  After warm-up the MEDIAN over many repetitions is
reported as TOPS = 2*M*N*K / time / 1e12.  Every tcgemm backend and every cuBLASLt
algorithm is checked for bit-exactness at every shape against torch._int_mm (or, where
_int_mm rejects the shape, an fp64 GPU matmul, which is exact for these magnitudes);
inexact results are flagged loudly.  cuBLASLt reports the best of its top-4 heuristic
algorithms with a 32 MiB workspace (see cublaslt_peer.cpp).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional

import torch

Shape = tuple[int, int, int]  # (M, N, K)
GemmFn = Callable[[int], torch.Tensor]  # input-set index -> output

HERE = Path(__file__).resolve().parent
SQUARE_SIZES = (1024, 2048, 4096, 8192, 16384)
MRANGE_MS = tuple(2**i for i in range(15))  # 1 .. 16384
MRANGE_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672))
QUICK_SHAPES: tuple[Shape, ...] = ((4096, 4096, 4096), (8192, 8192, 8192)) + tuple(
    (m, 4096, 4096) for m in (1, 16, 128, 512, 4096)
)
# The shapes the sm90 kernel's bars name: large, mid M and small M against N = K = 8192.
BARS_SHAPES: tuple[Shape, ...] = (
    (4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336), (2048, 28672, 8192),
    (128, 8192, 8192), (256, 8192, 8192), (512, 8192, 8192),
    (1, 8192, 8192), (16, 8192, 8192), (32, 8192, 8192), (64, 8192, 8192),
)
SLOW_BACKENDS = ("wmma_simple",)
# The skinny kernel is for a few rows (auto takes it for M <= 8); larger M only wastes the run.
FEW_ROWS_BACKENDS = ("skinny",)
FEW_ROWS_MAX_M = 64
PEERS = ("cublasLt", "_int_mm", "bf16", "fp8")
INT8_PEERS = ("cublasLt", "_int_mm")

CUBLASLT_WORKSPACE_BYTES = 32 * 1024 * 1024
CUBLASLT_TOP_ALGOS = 4
SENTINEL = torch.iinfo(torch.int32).min  # never a valid int8 x int8 dot product here

L2_MULTIPLE = 3  # input sets must exceed this many times the L2 size
DEFAULT_L2_BYTES = 60 * 1024 * 1024
INPUT_BUDGET_BYTES = 24 * 1024**3  # int8 + bf16 + fp8 copies of all sets
MAX_SETS = 64
WARMUP_CALLS = 5
MIN_REPS = 10
TIME_BUDGET_MS = 60.0  # per measurement; limits reps for slow shapes
HOST_LEAD_US_PER_REP = 100.0  # GPU sleep per rep so the host runs ahead of the GPU
DEFAULT_CLOCK_KHZ = 1_980_000


@dataclass
class InputSets:
    """Rotated operands: set i is (a[i], w[i]) plus bf16/fp8 copies of it."""

    a: list[torch.Tensor]
    w: list[torch.Tensor]
    a_bf16: list[torch.Tensor]
    w_bf16: list[torch.Tensor]
    a_fp8: list[torch.Tensor]
    w_fp8: list[torch.Tensor]
    scale_a: torch.Tensor  # [M,1] fp32
    scale_b: torch.Tensor  # [1,N] fp32

    def __len__(self) -> int:
        return len(self.a)


@dataclass
class Result:
    ms: Optional[float] = None
    exact: Optional[bool] = None  # None: not checked (bf16/fp8) or not run
    error: Optional[str] = None


@dataclass
class ShapeReport:
    shape: Shape
    n_sets: int
    reference: str
    results: dict[str, Result] = field(default_factory=dict)
    cublaslt_algos: list[dict[str, Any]] = field(default_factory=list)


# ----------------------------------------------------------------------------- setup


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", choices=("square", "mrange", "bars", "all"), default="all")
    p.add_argument("--quick", action="store_true",
                   help="4096^3, 8192^3 and M in {1,16,128,512,4096} on N=K=4096")
    p.add_argument("--backends", default=None,
                   help="comma-separated tcgemm backends (default: all available "
                        "except wmma_simple)")
    p.add_argument("--include-simple", action="store_true",
                   help="also benchmark the slow wmma_simple fallback")
    p.add_argument("--reps", type=int, default=100,
                   help="max timed repetitions per measurement (fewer, but at least "
                        f"{MIN_REPS}, when a measurement would exceed {TIME_BUDGET_MS:.0f} ms)")
    p.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    p.add_argument("--json", type=Path, default=None,
                   help="JSON path (default: OUT/bench_gemm.json)")
    p.add_argument("--plot", type=Path, default=None,
                   help="PNG path (default: OUT/bench_gemm_mrange.png)")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    args.json = args.json or args.out / "bench_gemm.json"
    args.plot = args.plot or args.out / "bench_gemm_mrange.png"
    return args


def select_shapes(sweep: str, quick: bool) -> dict[Shape, list[str]]:
    """Ordered, de-duplicated shapes mapped to the sweeps they belong to."""
    groups: list[tuple[str, list[Shape]]] = []
    if quick:
        groups.append(("quick", list(QUICK_SHAPES)))
    else:
        if sweep in ("square", "all"):
            groups.append(("square", [(s, s, s) for s in SQUARE_SIZES]))
        if sweep in ("mrange", "all"):
            groups.append(("mrange", [(m, n, k) for n, k in MRANGE_NK for m in MRANGE_MS]))
        if sweep in ("bars", "all"):
            groups.append(("bars", list(BARS_SHAPES)))
    shapes: dict[Shape, list[str]] = {}
    for name, group in groups:
        for shape in group:
            names = shapes.setdefault(shape, [])
            if name not in names:
                names.append(name)
    return shapes


def load_tcgemm(device: torch.device, requested: Optional[str],
                include_simple: bool) -> tuple[Optional[ModuleType], list[str]]:
    try:
        import tcgemm

        available = list(tcgemm.available_backends(device))
    except Exception as exc:  # benchmark the peers anyway
        print(f"!!! tcgemm unusable ({type(exc).__name__}: {exc}); running peers only")
        return None, []
    print(f"tcgemm backends available: {available}")
    if requested is None:
        return tcgemm, [b for b in available if include_simple or b not in SLOW_BACKENDS]
    wanted = [b.strip() for b in requested.split(",") if b.strip()]
    missing = [b for b in wanted if b not in available]
    if missing:
        print(f"!!! requested backends not available, skipped: {missing}")
    return tcgemm, [b for b in wanted if b in available]


def load_cublaslt_peer(device: torch.device) -> tuple[Any, Optional[bool]]:
    """JIT-build and self-check the cuBLASLt peer (build dir under /tmp).

    Returns (module, self_check_exact), or (None, None) if it cannot be used.
    """
    from torch.utils.cpp_extension import load

    build_dir = Path(tempfile.gettempdir()) / "tcgemm_cublaslt_peer_build"
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        peer = load(
            name="tcgemm_cublaslt_peer",
            sources=[str(HERE / "cublaslt_peer.cpp")],
            extra_cflags=["-O2"],
            extra_ldflags=["-lcublasLt"],
            build_directory=str(build_dir),
            with_cuda=True,
            verbose=False,
        )
        exact = cublaslt_self_check(peer, device)
    except Exception as exc:
        print(f"!!! cuBLASLt peer unavailable, continuing without it:\n{exc}")
        return None, None
    return peer, exact


def cublaslt_self_check(peer: Any, device: torch.device, shape: Shape = (64, 96, 128)) -> bool:
    """Run every heuristic algorithm on a small shape vs an int64 CPU matmul."""
    m, n, k = shape
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device)
    expected = (a.cpu().long() @ w.cpu().long().t()).to(torch.int32)
    plan = peer.Plan(m, n, k, CUBLASLT_WORKSPACE_BYTES, CUBLASLT_TOP_ALGOS)
    workspace = torch.empty(CUBLASLT_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    exact = plan.num_algos > 0
    for idx in range(plan.num_algos):
        d = torch.full((m, n), SENTINEL, dtype=torch.int32, device=device)
        plan.run(idx, a, w, d, workspace)
        exact = exact and torch.equal(d.cpu(), expected)
    flag = "" if exact else "   !!! NOT EXACT"
    print(f"cuBLASLt peer self-check {m}x{n}x{k} ({plan.num_algos} algos): exact={exact}{flag}")
    return exact


def l2_bytes(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)


def clock_khz(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "clock_rate", 0) or DEFAULT_CLOCK_KHZ)


def query_clocks(device: torch.device) -> Optional[dict[str, str]]:
    """Current/max SM and memory clocks and power limit from nvidia-smi, if present."""
    fields = ("clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "power.limit")
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    target = f"GPU-{uuid}" if uuid is not None else str(device.index)
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader",
           "-i", target]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in out.stdout.strip().split(",")]
    return dict(zip(fields, values)) if len(values) == len(fields) else None


def run_metadata(device: torch.device, tcgemm: Optional[ModuleType]) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(device)
    return {
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": l2_bytes(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tcgemm": getattr(tcgemm, "__version__", None) if tcgemm else None,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "clocks": query_clocks(device),
    }


# ----------------------------------------------------------------------------- inputs


def count_sets(shape: Shape, l2: int) -> int:
    m, n, k = shape
    int8_bytes = (m + n) * k
    wanted = math.ceil(L2_MULTIPLE * l2 / int8_bytes)
    cap = INPUT_BUDGET_BYTES // (4 * int8_bytes)  # int8 + bf16 (2x) + fp8
    return max(2, min(wanted, cap, MAX_SETS))


def make_input_sets(shape: Shape, n_sets: int, device: torch.device) -> InputSets:
    m, n, k = shape
    a = [torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device) for _ in range(n_sets)]
    w = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device) for _ in range(n_sets)]
    a_bf16 = [x.to(torch.bfloat16) for x in a]
    w_bf16 = [x.to(torch.bfloat16) for x in w]
    return InputSets(
        a=a,
        w=w,
        a_bf16=a_bf16,
        w_bf16=w_bf16,
        a_fp8=[(x / 16).to(torch.float8_e4m3fn) for x in a_bf16],
        w_fp8=[(x / 16).to(torch.float8_e4m3fn) for x in w_bf16],
        scale_a=torch.ones(m, 1, dtype=torch.float32, device=device),
        scale_b=torch.ones(1, n, dtype=torch.float32, device=device),
    )


def reference(sets: InputSets) -> tuple[torch.Tensor, str]:
    """Exact int32 a[0] @ w[0].t(): _int_mm, else fp64 (exact: |sums| << 2**53)."""
    a, w = sets.a[0], sets.w[0]
    try:
        return torch._int_mm(a, w.t()), "_int_mm"
    except RuntimeError:
        return (a.double() @ w.double().t()).to(torch.int32), "fp64"


# ----------------------------------------------------------------------------- timing


def median_ms(fn: GemmFn, n_sets: int, max_reps: int, device: torch.device) -> float:
    """Median device time of one call; consecutive calls use different input sets."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(WARMUP_CALLS):
        fn(i % n_sets)
    end.record()
    torch.cuda.synchronize(device)
    per_call_ms = max(start.elapsed_time(end) / WARMUP_CALLS, 1e-3)
    reps = min(max_reps, max(MIN_REPS, math.ceil(TIME_BUDGET_MS / per_call_ms)))

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    torch.cuda._sleep(int(clock_khz(device) * 1e-3 * HOST_LEAD_US_PER_REP * reps))
    for r in range(reps):
        starts[r].record()
        fn((WARMUP_CALLS + r) % n_sets)
        ends[r].record()
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def is_exact(name: str, shape: Shape, out: torch.Tensor, ref: torch.Tensor) -> bool:
    if out.dtype == ref.dtype and out.shape == ref.shape and torch.equal(out, ref):
        return True
    if out.dtype != ref.dtype or out.shape != ref.shape:
        detail = f"got {out.dtype} {tuple(out.shape)}, want {ref.dtype} {tuple(ref.shape)}"
    else:
        detail = f"{int((out != ref).sum())} of {ref.numel()} elements differ"
    print(f"!!! INEXACT: {name} at M={shape[0]} N={shape[1]} K={shape[2]}: {detail}")
    return False


def short_error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def measure(name: str, fn: GemmFn, shape: Shape, sets: InputSets,
            ref: Optional[torch.Tensor], max_reps: int, device: torch.device) -> Result:
    """Probe once (unsupported shapes raise), check exactness if ref given, then time."""
    try:
        out = fn(0)
    except Exception as exc:  # unsupported shape/backend: record and move on
        return Result(error=short_error(exc))
    exact = None if ref is None else is_exact(name, shape, out, ref)
    del out
    return Result(ms=median_ms(fn, len(sets), max_reps, device), exact=exact)


# ----------------------------------------------------------------------------- series


def tcgemm_fn(tcgemm: ModuleType, backend: str, sets: InputSets) -> GemmFn:
    return lambda i: tcgemm.int8_gemm(sets.a[i], sets.w[i].t(), backend=backend)


def int_mm_fn(sets: InputSets) -> GemmFn:
    return lambda i: torch._int_mm(sets.a[i], sets.w[i].t())


def bf16_fn(sets: InputSets) -> GemmFn:
    return lambda i: torch.mm(sets.a_bf16[i], sets.w_bf16[i].t())


def fp8_fn(sets: InputSets) -> GemmFn:
    return lambda i: torch._scaled_mm(sets.a_fp8[i], sets.w_fp8[i].t(), scale_a=sets.scale_a,
                                      scale_b=sets.scale_b, out_dtype=torch.bfloat16)


def cublaslt_fn(plan: Any, algo: int, sets: InputSets, d: torch.Tensor,
                workspace: torch.Tensor) -> GemmFn:
    def run(i: int) -> torch.Tensor:
        plan.run(algo, sets.a[i], sets.w[i], d, workspace)
        return d

    return run


def bench_cublaslt(peer: Any, shape: Shape, sets: InputSets, ref: torch.Tensor,
                   workspace: torch.Tensor, max_reps: int,
                   device: torch.device) -> tuple[Result, list[dict[str, Any]]]:
    """Time each top heuristic algorithm; report the fastest (with its exact flag)."""
    m, n, k = shape
    try:
        plan = peer.Plan(m, n, k, CUBLASLT_WORKSPACE_BYTES, CUBLASLT_TOP_ALGOS)
    except RuntimeError as exc:
        return Result(error=short_error(exc)), []
    if plan.num_algos == 0:
        return Result(error="no cuBLASLt heuristic algorithm for this shape"), []
    per_algo: list[tuple[int, Result]] = []
    for idx in range(plan.num_algos):
        d = torch.full((m, n), SENTINEL, dtype=torch.int32, device=device)
        fn = cublaslt_fn(plan, idx, sets, d, workspace)
        per_algo.append((idx, measure(f"cublasLt[algo {idx}]", fn, shape, sets, ref,
                                      max_reps, device)))
    algos = [{"index": idx, "ms": r.ms, "tops": tops(shape, r.ms), "exact": r.exact,
              "error": r.error, "workspace_bytes": plan.algo_workspace(idx),
              "waves": plan.algo_waves(idx)} for idx, r in per_algo]
    timed = [(idx, r) for idx, r in per_algo if r.ms is not None]
    if not timed:
        return Result(error=per_algo[0][1].error), algos
    best_idx, best = min(timed, key=lambda item: item[1].ms)
    for entry in algos:
        entry["best"] = entry["index"] == best_idx
    return best, algos


def bench_shape(shape: Shape, tcgemm: Optional[ModuleType], backends: list[str],
                peer: Any, workspace: torch.Tensor, max_reps: int,
                device: torch.device) -> ShapeReport:
    sets = make_input_sets(shape, count_sets(shape, l2_bytes(device)), device)
    ref, ref_name = reference(sets)
    report = ShapeReport(shape=shape, n_sets=len(sets), reference=ref_name)
    for backend in backends:
        if backend in FEW_ROWS_BACKENDS and shape[0] > FEW_ROWS_MAX_M:
            report.results[backend] = Result(error=f"not timed above M = {FEW_ROWS_MAX_M}")
            continue
        report.results[backend] = measure(backend, tcgemm_fn(tcgemm, backend, sets), shape,
                                          sets, ref, max_reps, device)
    if peer is None:
        report.results["cublasLt"] = Result(error="cuBLASLt peer missing")
    else:
        report.results["cublasLt"], report.cublaslt_algos = bench_cublaslt(
            peer, shape, sets, ref, workspace, max_reps, device)
    int_mm_ref = None if ref_name == "_int_mm" else ref  # never checked against itself
    report.results["_int_mm"] = measure("_int_mm", int_mm_fn(sets), shape, sets, int_mm_ref,
                                        max_reps, device)
    report.results["bf16"] = measure("bf16", bf16_fn(sets), shape, sets, None, max_reps, device)
    report.results["fp8"] = measure("fp8", fp8_fn(sets), shape, sets, None, max_reps, device)
    return report


# ----------------------------------------------------------------------------- output


def tops(shape: Shape, ms: Optional[float]) -> Optional[float]:
    m, n, k = shape
    return None if ms is None else 2.0 * m * n * k / (ms * 1e-3) / 1e12


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    return None if num is None or not den else num / den


def to_record(report: ShapeReport, backends: list[str], sweeps: list[str],
              meta: dict[str, Any]) -> dict[str, Any]:
    shape = report.shape
    series = backends + list(PEERS)
    tops_by = {s: tops(shape, report.results[s].ms) for s in series}
    peer_tops = [tops_by[p] for p in INT8_PEERS if tops_by[p] is not None]
    best_peer = max(peer_tops, default=None)
    return {
        "M": shape[0], "N": shape[1], "K": shape[2],
        "sweeps": sweeps,
        "backends": backends,
        "tops": tops_by,
        "ms": {s: report.results[s].ms for s in series},
        "exact": {s: report.results[s].exact for s in series},
        "errors": {s: report.results[s].error for s in series if report.results[s].error},
        "reference": report.reference,
        "n_input_sets": report.n_sets,
        "best_int8_peer_tops": best_peer,
        "ratio_vs_best_int8_peer": {b: ratio(tops_by[b], best_peer) for b in backends},
        "ratio_vs_int_mm": {b: ratio(tops_by[b], tops_by["_int_mm"]) for b in backends},
        "cublasLt_algos": report.cublaslt_algos,
        **meta,
    }


def progress_line(index: int, total: int, record: dict[str, Any]) -> str:
    parts = []
    for name, value in record["tops"].items():
        exact = record["exact"][name]
        mark = "" if exact is None else (" exact" if exact else " INEXACT!")
        parts.append(f"{name}={'-' if value is None else f'{value:.1f}'}{mark}")
    head = f"[{index}/{total}] M={record['M']} N={record['N']} K={record['K']}"
    return f"{head} (sets={record['n_input_sets']}, ref={record['reference']}): " + ", ".join(parts)


def format_table(records: list[dict[str, Any]], backends: list[str]) -> str:
    series = backends + list(PEERS)
    ratio_cols = [(b, kind) for b in backends for kind in ("peer", "imm")]
    headers = (["M", "N", "K"] + series
               + [f"{b}/{'best' if kind == 'peer' else '_int_mm'}" for b, kind in ratio_cols])
    widths = [max(6, len(h)) for h in headers[:3]] + [max(9, len(h)) for h in headers[3:]]

    def cell_tops(rec: dict[str, Any], s: str) -> str:
        value = rec["tops"][s]
        if value is None:
            return "-"
        return f"{value:.{1 if value >= 10 else 2}f}" + ("!" if rec["exact"][s] is False else "")

    def cell_ratio(rec: dict[str, Any], b: str, kind: str) -> str:
        value = (rec["ratio_vs_best_int8_peer"] if kind == "peer" else rec["ratio_vs_int_mm"])[b]
        return "-" if value is None else f"{value:.2f}x"

    def row(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths))

    lines = [
        "TOPS (int8: tera int-ops/s; bf16/fp8: TFLOP/s) = 2*M*N*K / median time. "
        "'-' = unsupported/missing, '!' = INEXACT result. "
        "best = max(cublasLt, _int_mm).",
        row(headers),
        row(["-" * w for w in widths]),
    ]
    for rec in records:
        cells = [str(rec["M"]), str(rec["N"]), str(rec["K"])]
        cells += [cell_tops(rec, s) for s in series]
        cells += [cell_ratio(rec, b, kind) for b, kind in ratio_cols]
        lines.append(row(cells))
    return "\n".join(lines)


def write_json(records: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=2) + "\n")
    print(f"wrote {path}")


def write_plot(records: list[dict[str, Any]], backends: list[str], path: Path) -> None:
    """TOPS vs M (log2) per (N,K) of the M-range sweep, one subplot each."""
    groups = [(n, k, sorted((r for r in records if (r["N"], r["K"]) == (n, k)),
                            key=lambda r: r["M"])) for n, k in MRANGE_NK]
    groups = [g for g in groups if len(g[2]) >= 2]
    if not groups:
        print("no M-range data to plot")
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: skipping the plot")
        return
    cols = min(3, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.2 * rows), squeeze=False)
    colors = plt.get_cmap("tab10")  # one colour per series in every subplot
    for ax, (n, k, recs) in zip(axes.flat, groups):
        for i, s in enumerate(backends + list(PEERS)):
            points = [(r["M"], r["tops"][s]) for r in recs if r["tops"][s] is not None]
            if points:
                # matplotlib hides legend labels that start with "_", hence "torch._int_mm"
                label = f"torch.{s}" if s == "_int_mm" else s if s in PEERS else f"tcgemm:{s}"
                ax.plot(*zip(*points), marker="o", markersize=3, color=colors(i % 10),
                        linestyle="--" if s in PEERS else "-", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"N={n}, K={k}")
        ax.set_xlabel("M")
        ax.set_ylabel("TOPS")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.suptitle(f"INT8 GEMM (TN) on {records[0]['device']}, torch {records[0]['torch']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


# ----------------------------------------------------------------------------- main


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("a CUDA device is required", file=sys.stderr)
        return 1
    device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)
    tcgemm, backends = load_tcgemm(device, args.backends, args.include_simple)
    peer, peer_self_check = load_cublaslt_peer(device)
    meta = run_metadata(device, tcgemm) | {"cublasLt_self_check_exact": peer_self_check}
    shapes = select_shapes(args.sweep, args.quick)
    workspace = torch.empty(CUBLASLT_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    print(f"{meta['device']}: {len(shapes)} shapes, tcgemm backends {backends}, "
          f"clocks {meta['clocks']}")

    records = []
    for index, (shape, sweeps) in enumerate(shapes.items(), start=1):
        report = bench_shape(shape, tcgemm, backends, peer, workspace, args.reps, device)
        records.append(to_record(report, backends, sweeps, meta))
        print(progress_line(index, len(shapes), records[-1]), flush=True)
        torch.cuda.empty_cache()

    write_json(records, args.json)
    write_plot(records, backends, args.plot)
    print()
    print(format_table(records, backends))
    return 0


if __name__ == "__main__":
    sys.exit(main())

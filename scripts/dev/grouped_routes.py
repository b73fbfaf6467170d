"""The two GPU routes of 4-bit weights with fp32 scales per 64 or 32 inputs, at 1-2048 rows.

    python3 -m scripts.dev.grouped_routes

Per layer and row count, us per call of: the layer's weight with scales per 128 inputs through
tcgemm.quant_linear ("g128"); with scales per 64 and per 32 inputs through tcgemm.quant_linear,
which runs them on the few-rows kernel's slot rows at every row count ("op"), and through
tcgemm.int4.grouped_linear_by_phases ("ph"). Each call is captured five times per CUDA graph
over four weight copies (rotated, so that the weights come from memory), the methods interleaved
within each of 15 rounds, the median printed; bf16 x. QuantLinear's threshold between the two,
tcgemm.int4.GROUPED_KERNEL_ROWS, comes from this table (docs/design/int4.md).
"""

from __future__ import annotations

import statistics

import torch

import tcgemm
from tcgemm.int4 import grouped_linear_by_phases

LAYERS = [("8B qkv", 4096, 6144), ("8B gate+up", 4096, 28672), ("8B down", 14336, 4096), ("70B o", 8192, 8192)]
ROWS = [1, 16, 64, 128, 256, 512, 2048]
COPIES, CALLS, ROUNDS = 4, 5, 15


def timed(fns):
    """Median us per call of each method (a list of calls, one per weight copy), interleaved."""
    for calls in fns.values():
        for call in calls:
            call()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(ROUNDS):
        for name, calls in fns.items():
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(CALLS):
                    for call in calls:
                        call()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) * 1000 / (CALLS * len(calls)))
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    gen = torch.Generator().manual_seed(0)
    heads = ["g128", "g64 op", "g64 ph", "g32 op", "g32 ph"]
    print(f"{torch.cuda.get_device_name()}, us per call")
    print(f"{'layer':12s} {'M':>4s} " + " ".join(f"{h:>8s}" for h in heads))
    for name, k, n in LAYERS:
        weights = [torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=gen).cuda() for _ in range(COPIES)]
        scales = {size: [torch.rand(n, -(-k // size), generator=gen).cuda() * 1e-2 for _ in range(COPIES)]
                  for size in (128, 64, 32)}
        for m in ROWS:
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
            fns = {"g128": [lambda w=w, s=s: tcgemm.quant_linear(x, w, s) for w, s in zip(weights, scales[128])]}
            for size in (64, 32):
                fns[f"g{size} op"] = [lambda w=w, s=s: tcgemm.quant_linear(x, w, s)
                                      for w, s in zip(weights, scales[size])]
                fns[f"g{size} ph"] = [lambda w=w, s=s, size=size: grouped_linear_by_phases(x, w, s, size)
                                      for w, s in zip(weights, scales[size])]
            t = timed(fns)
            print(f"{name:12s} {m:4d} " + " ".join(f"{t[h]:8.1f}" for h in heads), flush=True)


if __name__ == "__main__":
    main()

"""W4A8 layers between decode and prefill: the packed weight read in place against unpacked first.

    python3 -m benchmarks.bench_int4_tiled [--layers 8B_up,8B_down] [--rows 17 64 256 512 1024 2048]

For each layer of ``bench_decode`` (K -> N) and row count, three ways to compute the same
``QuantLinear(scheme="w4a8")`` layer (two-level scales, int8 activations per token): ``w4a8`` the
layer as it runs (above 16 rows, on Hopper, the tiled sm90 kernel reads the packed weight and
unpacks it in shared memory where ``dispatch/plan.cpp``'s ``use_sm90_int4`` takes the shape);
``unpacked first`` ``tcgemm.unpack_int4`` into an int8 weight on every call, then
``tcgemm.quant_linear`` on it (what other shapes run); and ``w8a8`` the int8 layer of the same
weight (``QuantLinear``), the speed the 4-bit layer is measured against at prefill. CUDA graphs,
weight copies rotated past the L2, methods interleaved (``bench_decode.time_methods``); us per call.
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks import timing
from benchmarks.bench_decode import layer_bench_args, time_methods

ROWS = (17, 64, 256, 512, 1024, 2048)


def methods(k: int, n: int, m: int, device) -> tuple[dict, int]:
    import tcgemm

    n_sets = timing.input_sets(n * k // 2, device)
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    w4, w8 = [], []
    for _ in range(n_sets):
        lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
        w4.append(tcgemm.QuantLinear.from_linear(lin, scheme="w4a8"))
        w8.append(tcgemm.QuantLinear.from_linear(lin))
        del lin

    def unpacked_first(i):
        layer = w4[i]
        weight = tcgemm.unpack_int4(layer.weight, layer.weight_group_scale)
        return tcgemm.quant_linear(x, weight, layer.weight_scale)

    return {"w4a8": lambda i: w4[i](x), "unpacked first": unpacked_first, "w8a8": lambda i: w8[i](x)}, n_sets


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=list(ROWS), help=f"row counts (default {ROWS})")
    parsed = layer_bench_args(p, argv, "bench_int4_tiled", "8B_up,8B_down,8B_qkv", "8B_up,8B_down,8B_qkv")
    if parsed is None:
        return 1
    args, layers, device = parsed
    print(f"# {torch.cuda.get_device_name(device)}, us per call (CUDA graphs)")
    print("| layer | K->N | M | W4A8 us | unpacked first us | W8A8 us | W4A8 x unpacked first | W4A8 x W8A8 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name, k, n in layers:
        for m in args.rows:
            fns, n_sets = methods(k, n, m, device)
            t = time_methods(fns, n_sets, True)
            print(f"| {name} | {k}->{n} | {m} | {t['w4a8']:.1f} | {t['unpacked first']:.1f} | {t['w8a8']:.1f} | "
                  f"{t['unpacked first'] / t['w4a8']:.2f}x | {t['w8a8'] / t['w4a8']:.2f}x |", flush=True)
            del fns
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())

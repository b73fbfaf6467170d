"""Where a W4A8 QuantLinear call at decode spends its time (GPU): the layer against its parts
timed alone, in graphs of rotated weight copies (bench_decode.time_methods).

    python3 -m scripts.dev.int4_anatomy [--rows 1 16]

Per layer and row count: the layer (`QuantLinear(scheme="w4a8")`: at up to 4 rows of at most 8192
values one kernel, else tcgemm.quantize then the GEMM, overlapped); tcgemm.quantize alone; and
int4_gemm on the pre-quantized rows (the GEMM alone, int32 out, not overlapped).
"""

from __future__ import annotations

import argparse

import torch

import tcgemm
from benchmarks import timing
from benchmarks.bench_decode import time_methods

LAYERS = [("8B o", 4096, 4096), ("8B qkv", 4096, 6144), ("8B down", 14336, 4096), ("70B o", 8192, 8192)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.int4_anatomy", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 16])
    args = p.parse_args(argv)
    device = torch.device("cuda")
    print(f"# {torch.cuda.get_device_name(device)}, us per call (CUDA graphs)")
    for name, k, n in LAYERS:
        for m in args.rows:
            n_sets = timing.input_sets(n * k // 2, device)
            x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            a, _ = tcgemm.quantize(x, "token")
            layers = []
            for _ in range(n_sets):
                lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
                layers.append(tcgemm.QuantLinear.from_linear(lin, scheme="w4a8"))
                del lin
            fns = {"layer": lambda i: layers[i](x),
                   "quantize": lambda i: tcgemm.quantize(x, "token"),
                   "int4_gemm": lambda i: tcgemm.int4_gemm(a, layers[i].weight, layers[i].weight_group_scale)}
            t = time_methods(fns, n_sets, True)
            print(f"{name} M={m}: " + "  ".join(f"{key} {value:.2f}" for key, value in t.items()), flush=True)
            del layers, fns
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

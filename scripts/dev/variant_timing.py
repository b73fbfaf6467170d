"""Two variants of a decode kernel in one process (GPU): a build whose launcher picks the variant
when the environment variable VAR is set (a temporary hook in csrc/dispatch/launch.cpp, not kept),
timed against the default with the layers of benchmarks.bench_decode, in CUDA graphs of rotated
weight copies, methods interleaved; the variable is read when each graph is captured.

    python3 -m scripts.dev.variant_timing VAR [--rows 1 4 16]

Per layer and row count: bf16 F.linear, and default -> variant (speed-up) for quant_linear with
per-channel weights and per-token activations (ql), with 128x128 weight blocks and 1x128
activation groups (qlblock), and scaled_gemm on rows quantized beforehand (gemm).
"""
import argparse
import math
import os

import torch
import torch.nn.functional as F

import tcgemm
from benchmarks import timing
from benchmarks.bench_decode import LAYERS, time_methods


def with_env(var, on, fn):
    def call(i):
        if on:
            os.environ[var] = "1"
        else:
            os.environ.pop(var, None)
        return fn(i)
    return call


def main():
    p = argparse.ArgumentParser()
    p.add_argument("var")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16])
    args = p.parse_args()
    dev = torch.device("cuda")
    with torch.no_grad():
        for name, k, n in LAYERS:
            n_sets = max(2, math.ceil(3 * timing.l2_bytes(dev) / (n * k)))
            ws, qs, ss, bqs, bss = [], [], [], [], []
            for _ in range(n_sets):
                w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
                q, s = tcgemm.nn.quantize_weight(w, "channel")
                bq, bs = tcgemm.nn.quantize_weight(w, "block")
                ws.append(w), qs.append(q), ss.append(s), bqs.append(bq), bss.append(bs)
            for m in args.rows:
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                xq, xs = tcgemm.quantize(x, "token")
                fns = {"bf16": lambda i: F.linear(x, ws[i])}
                for on in (False, True):
                    tag = "var" if on else "base"
                    fns[f"ql_{tag}"] = with_env(args.var, on, lambda i: tcgemm.quant_linear(x, qs[i], ss[i], None, "token"))
                    fns[f"qlblock_{tag}"] = with_env(args.var, on, lambda i: tcgemm.quant_linear(x, bqs[i], bss[i], None, "block"))
                    fns[f"gemm_{tag}"] = with_env(args.var, on, lambda i: tcgemm.scaled_gemm(xq, qs[i].t(), xs, ss[i], None, torch.bfloat16))
                t = time_methods(fns, n_sets, graphs=True)
                ratios = "  ".join(f"{mth}: {t[mth + '_base']:.1f} -> {t[mth + '_var']:.1f} ({t[mth + '_base'] / t[mth + '_var']:.3f}x)"
                                   for mth in ("ql", "qlblock", "gemm"))
                print(f"{name:>10s} M={m:<2d} bf16 {t['bf16']:.1f}  {ratios}", flush=True)
            del ws, qs, ss, bqs, bss
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

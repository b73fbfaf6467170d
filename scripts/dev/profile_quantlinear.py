"""Kernels behind one QuantLinear forward (default: the Llama-3-8B down projection, M = 2048).

    python3 -m scripts.dev.profile_quantlinear [--in-features 14336] [--out-features 4096] [--tokens 2048]

Prints the CUDA kernels (torch profiler) of 20 forwards over 4 rotated layers and inputs, then the
same for the bare quantize + scaled_gemm calls and for the bf16 nn.Linear, so the three can be
compared kernel by kernel.
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import tcgemm

N_SETS = 4


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.profile_quantlinear",
                                description=__doc__.splitlines()[0])
    p.add_argument("--in-features", type=int, default=14336)
    p.add_argument("--out-features", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=2048)
    args = p.parse_args(argv)
    k, n, m = args.in_features, args.out_features, args.tokens
    lins = [torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(N_SETS)]
    qls = [tcgemm.QuantLinear.from_linear(lin) for lin in lins]
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(N_SETS)]

    def bare(i):
        q, s = tcgemm.quantize(xs[i], "token")
        return tcgemm.scaled_gemm(q, qls[i].weight.t(), s, qls[i].weight_scale, None)

    for name, fn in [("QuantLinear", lambda i: qls[i](xs[i])), ("quantize + scaled_gemm", bare),
                     ("bf16 Linear", lambda i: lins[i](xs[i]))]:
        with torch.no_grad():
            for i in range(8):
                fn(i % N_SETS)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for i in range(20):
                    fn(i % N_SETS)
                torch.cuda.synchronize()
        print(f"== {name}: {m} x {k} -> {n}")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=6, max_name_column_width=60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Kernels behind one QuantLinear forward (Llama-3-8B down projection, M = 2048), torch profiler.

    python3 tools/profile_quantlinear.py [in_features out_features]
Prints the CUDA kernels of 20 forwards over 4 rotated layers/inputs, and the same for the bare
quantize + scaled_gemm calls, so the two can be compared kernel by kernel.
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import tcgemm

k, n = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (14336, 4096)
m, sets = 2048, 4
lins = [torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
qls = [tcgemm.QuantLinear.from_linear(lin) for lin in lins]
xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]


def bare(i):
    q, s = tcgemm.quantize(xs[i], "token")
    return tcgemm.scaled_gemm(q, qls[i].weight.t(), s, qls[i].weight_scale, None)


for name, fn in [("QuantLinear", lambda i: qls[i](xs[i])), ("quantize+scaled_gemm", bare),
                 ("bf16 Linear", lambda i: lins[i](xs[i]))]:
    with torch.no_grad():
        for i in range(8):
            fn(i % sets)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(20):
                fn(i % sets)
            torch.cuda.synchronize()
    print(f"== {name}")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=6, max_name_column_width=60))

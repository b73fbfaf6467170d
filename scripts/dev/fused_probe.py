"""The one-kernel few-rows layer against its two kernels, for a kernel profiler: M = 1, bf16,
per-channel weights, the Llama-3-8B o, qkv, gate+up and down shapes; each call three times.

    ncu --metrics gpu__time_duration.sum python3 -m scripts.dev.fused_probe

(docs/design/decode.md, "One kernel at a few rows").
"""

import torch

import tcgemm
from tcgemm.nn import quantize_weight


def main() -> None:
    torch.manual_seed(0)
    for k, n in [(4096, 4096), (4096, 6144), (4096, 28672), (14336, 4096)]:
        q, s = quantize_weight(torch.randn(n, k, device="cuda"), "channel")
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            tcgemm.quant_linear(x, q, s, None, "token")  # one kernel where the route allows
            qx, sx = tcgemm.quantize(x, "token")  # the two kernels it replaces
            tcgemm.scaled_gemm(qx, q.t(), sx, s, out_dtype=torch.bfloat16)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

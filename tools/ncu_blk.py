"""A per-block scaled GEMM (4096^3, 1x128 activation x 128x128 weight scales) for ncu to profile:

    ncu --clock-control none --kernel-name regex:sm90_int8_gemm_kernel --launch-skip 2 --launch-count 1 \
        --section WarpStateStats --section SourceCounters -o blk python3 tools/ncu_blk.py
    ncu --import blk.ncu-rep --page source --csv --print-source sass > blk_sass.csv   # stalls per instruction
"""
import torch

import tcgemm

m = n = k = 4096
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda") * 0.02
qx, sx = tcgemm.quantize(x, "group")
qw, _ = tcgemm.quantize(w, "token")
swb = (w.abs().reshape(n // 128, 128, k // 128, 128).amax(dim=(1, 3)) / 127).float().contiguous()
for _ in range(5):
    tcgemm.scaled_gemm(qx, qw.t(), sx, swb)
torch.cuda.synchronize()

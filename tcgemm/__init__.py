"""tcgemm: INT8 tensor-core GEMM for PyTorch.

    import tcgemm
    c = tcgemm.int8_gemm(a, b)                      # int8/uint8 [M,K] @ [K,N] -> exact int32 [M,N]
    d = tcgemm.gemm(a, b, c, alpha=2, beta=-1)      # D = alpha*A@B + beta*C in int32
    y = tcgemm.scaled_gemm(qa, qb, sa, sb, bias)     # int8 GEMM, scales fused -> bf16
"""

from ._ops import BACKENDS, available_backends, gemm, int8_gemm, scaled_gemm
from . import reference

__all__ = ["BACKENDS", "available_backends", "gemm", "int8_gemm", "reference", "scaled_gemm"]
__version__ = "0.1.0"

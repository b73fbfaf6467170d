"""tcgemm: INT8 tensor-core GEMM for PyTorch.

    import tcgemm
    c = tcgemm.int8_gemm(a, b)                      # int8/uint8 [M,K] @ [K,N] -> exact int32 [M,N]
    d = tcgemm.gemm(a, b, c, alpha=2, beta=-1)      # D = alpha*A@B + beta*C in int32
    q, s = tcgemm.quantize(x, "token")              # symmetric int8 with fp32 scales (tensor/token/group)
"""

from ._ops import BACKENDS, available_backends, gemm, int8_gemm
from ._quantize import quantize
from . import reference

__all__ = ["BACKENDS", "available_backends", "gemm", "int8_gemm", "quantize", "reference"]
__version__ = "0.1.0"

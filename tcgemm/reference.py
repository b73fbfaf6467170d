"""Pure-PyTorch reference implementations: the definition the kernels are tested against."""

from __future__ import annotations

from typing import Optional

import torch


def wrap_int32(x: torch.Tensor) -> torch.Tensor:
    """Reduces an int64 tensor modulo 2**32 into int32 (two's complement), as the kernels do."""
    return ((x + 2**31) % 2**32 - 2**31).to(torch.int32)


def gemm_reference(
    a: torch.Tensor, b: torch.Tensor, c: Optional[torch.Tensor] = None, alpha: int = 1, beta: int = 0
) -> torch.Tensor:
    """alpha * (A @ B) + beta * C computed exactly in int64 on the CPU, then wrapped to int32."""
    acc = wrap_int32(a.cpu().long() @ b.cpu().long()).long()
    out = acc * alpha
    if beta != 0:
        if c is None:
            raise ValueError("gemm_reference: beta != 0 needs c")
        out = out + beta * c.cpu().long()
    return wrap_int32(out)

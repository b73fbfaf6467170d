"""Pure-PyTorch reference implementations: the definition the kernels are tested against."""

from __future__ import annotations

import math
from typing import Optional

import torch

from ._scales import SCALE_BLOCK, decode_scale_a, decode_scale_b, expand_scale, k_blocks, scale_blocks


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


def _scale_table(scale: torch.Tensor, layout: Optional[str], rows: int, k: int) -> torch.Tensor:
    """The [rows, ceil(K/128)] float64 table s[r, kb] of a scale tensor in one of scaled_gemm's layouts."""
    if layout is None:
        raise ValueError(f"scaled_gemm_reference: unsupported scale shape {list(scale.shape)}")
    return expand_scale(scale.detach().cpu().double(), layout, rows, k)


def scaled_gemm_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    return_float64: bool = False,
) -> torch.Tensor:
    """The scaled GEMM in float64 on the CPU: exact int64 partial sums per 128-wide K block,
    times float64 scales, summed, plus bias; then cast to ``out_dtype`` (or returned unrounded
    with ``return_float64=True``)."""
    m, k = a.shape
    n = b.shape[1]
    sa = _scale_table(scale_a, decode_scale_a(scale_a.shape, m, k), m, k)
    sb = _scale_table(scale_b, decode_scale_b(scale_b.shape, n, k), n, k)
    a64, b64 = a.cpu().long(), b.cpu().long()
    out = torch.zeros(m, n, dtype=torch.float64)
    for blk in range(k_blocks(k)):
        lo, hi = blk * SCALE_BLOCK, min(k, (blk + 1) * SCALE_BLOCK)
        if lo >= hi:
            break
        partial = (a64[:, lo:hi] @ b64[lo:hi, :]).double()
        out += partial * sa[:, blk : blk + 1] * sb[:, blk].reshape(1, n)
    if bias is not None:
        out += bias.detach().cpu().double().reshape(1, n)
    return out if return_float64 else out.to(out_dtype)


def quantize_reference(
    x: torch.Tensor, granularity: str = "token", scale: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 quantization of ``x`` [M, K] (or [..., K]), defined in plain torch.

    amax = max |x| over the group (whole tensor, row, or 128-wide K group of a row; the last
    group may be short), in fp32; scale = amax / 127 in fp32, and 1.0 where amax == 0;
    q = clamp(round_half_even(float(x) / scale), -127, 127) as int8. A given ``scale`` (static
    quantization) is used as is and returned unchanged. Computed on the CPU (CUDA torch divides
    by a Python scalar through its reciprocal, which is not the IEEE quotient); q and the
    computed scale are returned on the device of ``x``, scale shaped [] / [..., 1] / [..., G].
    """
    if granularity not in ("tensor", "token", "group"):
        raise ValueError(f"quantize_reference: unknown granularity {granularity!r}")
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m = math.prod(lead)
    xf = x.detach().cpu().float().reshape(m, k)
    if scale is not None:
        s = scale.detach().cpu().float()
        if granularity == "tensor":
            s_full = s.reshape(1, 1).expand(m, k)
        elif granularity == "token":
            s_full = s.reshape(m, 1).expand(m, k)
        else:
            s_full = s.reshape(m, scale_blocks(k)).repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]
    else:
        if granularity == "tensor":
            amax = xf.abs().amax() if xf.numel() else torch.zeros(())
        elif granularity == "token":
            amax = xf.abs().amax(dim=1, keepdim=True) if k else torch.zeros(m, 1)
        else:
            groups = scale_blocks(k)
            padded = torch.zeros(m, groups * SCALE_BLOCK)
            padded[:, :k] = xf.abs()  # zeros never raise an amax
            amax = padded.reshape(m, groups, SCALE_BLOCK).amax(dim=2)
        s = torch.where(amax == 0, torch.ones_like(amax), amax / 127)
        s_full = s.reshape(1, 1) if granularity == "tensor" else s
        if granularity == "group":
            s_full = s.repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]
    q = torch.round(xf / s_full).clamp(-127, 127).to(torch.int8).reshape(x.shape)
    if scale is not None:
        return q.to(x.device), scale
    if granularity != "tensor":
        s = s.reshape(*lead, s.shape[-1])
    return q.to(x.device), s.to(x.device)

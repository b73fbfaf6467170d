"""Pure-PyTorch reference implementations: the definition the kernels are tested against."""

from __future__ import annotations

import math
from typing import Optional

import torch

from ._scales import (
    SCALE_BLOCK, decode_scale_a, decode_scale_b, expand_scale, groups_of, per_element, quantize_scale_shape,
    weight_group_size,
)
from .rotation import rotate_blocks
from .scheme import ACTIVATION_GRANULARITIES


def wrap_int32(x: torch.Tensor) -> torch.Tensor:
    """Reduces an int64 tensor ``x`` modulo 2**32 into int32 (two's complement), as the kernels do."""
    return ((x + 2**31) % 2**32 - 2**31).to(torch.int32)


def gemm_reference(
    a: torch.Tensor, b: torch.Tensor, c: Optional[torch.Tensor] = None, alpha: int = 1, beta: int = 0
) -> torch.Tensor:
    """alpha * (A @ B) + beta * C computed exactly in int64 on the CPU, then wrapped to int32.

    Args:
        a: integer [M, K] (int8 or uint8 for the kernels' contract), on any device.
        b: integer [K, N].
        c: integer [M, N] (broadcastable), read only when ``beta != 0`` (ValueError if absent then).
        alpha: the int multiplying ``A @ B`` (after the product is wrapped to int32).
        beta: the int multiplying ``c``.

    Returns:
        int32 [M, N] on the CPU.
    """
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
    zero_point_a: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The scaled GEMM in float64 on the CPU: exact int64 partial sums per 128-wide K block,
    times float64 scales, summed, plus bias; then cast to ``out_dtype`` (or returned unrounded
    with ``return_float64=True``). With ``zero_point_a`` (int32, one element or [M, 1]) the
    sums are those of ``a - zero_point_a``, exact in int64. A ``scale_b`` of fp32 scales per
    group of 64 or 32 inputs of each output channel, [N, ceil(K/64)] or [N, ceil(K/32)] (what
    ``tcgemm.quant_linear`` takes with 4-bit weights, told apart by width), gives exact int64
    sums per group, each times its group's scale and its K block's ``scale_a``.

    Args:
        a: int8 [M, K].
        b: int8 [K, N].
        scale_a: fp32 in a layout of :func:`tcgemm.scaled_gemm` (per tensor, per token or per
            1x128 block); another shape raises ValueError.
        scale_b: fp32 in a layout of :func:`tcgemm.scaled_gemm` (per tensor, per channel, per
            128x128 block or per channel and 1x128 block), or per channel and group of 64 or 32
            inputs (also bf16 or fp16, read exactly); another shape raises ValueError.
        bias: optional [N], any float dtype (added in float64).
        out_dtype: the dtype of the result.
        return_float64: return the float64 sums unrounded instead.
        zero_point_a: optional int32 zero points of ``a``, one element or [M, 1].

    Returns:
        [M, N] of ``out_dtype`` (or float64) on the CPU.
    """
    m, k = a.shape
    n = b.shape[1]
    sa = _scale_table(scale_a, decode_scale_a(scale_a.shape, m, k), m, k)
    layout_b = decode_scale_b(scale_b.shape, n, k)
    group = SCALE_BLOCK  # the K extent of one partial sum: a block, or a group of the weight's scales
    if layout_b is None and scale_b.dim() == 2 and scale_b.shape[0] == n:
        group = weight_group_size(scale_b.shape[1], k) or SCALE_BLOCK
    if group != SCALE_BLOCK:  # [N, ceil(K/group)]: one scale per channel and group
        sb = scale_b.detach().cpu().double()
    else:
        sb = _scale_table(scale_b, layout_b, n, k)
    a64, b64 = a.cpu().long(), b.cpu().long()
    if zero_point_a is not None:
        a64 = a64 - zero_point_a.detach().cpu().long().reshape(-1, 1)
    out = torch.zeros(m, n, dtype=torch.float64)
    for g in range(groups_of(k, group)):
        lo, hi = g * group, min(k, (g + 1) * group)
        blk = lo // SCALE_BLOCK  # the K block of a's scales (a group lies within one)
        partial = (a64[:, lo:hi] @ b64[lo:hi, :]).double()
        out += partial * sa[:, blk : blk + 1] * sb[:, g].reshape(1, n)
    if bias is not None:
        out += bias.detach().cpu().double().reshape(1, n)
    return out if return_float64 else out.to(out_dtype)


def quantize_reference(
    x: torch.Tensor,
    granularity: str = "token",
    scale: Optional[torch.Tensor] = None,
    smooth: Optional[torch.Tensor] = None,
    symmetric: bool = True,
    zero_point: Optional[torch.Tensor] = None,
    rotate: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Symmetric int8 quantization of ``x`` [M, K] (or [..., K]), defined in plain torch.

    amax = max |x| over the group (whole tensor, row, or 128-wide K group of a row; the last
    group may be short), in fp32; scale = amax / 127 in fp32, 1.0 where amax == 0, and NaN where
    the group holds a NaN or an inf; q = clamp(round_half_even(float(x) / scale), -127, 127) as
    int8, and 0 where x is not finite or the scale is not a positive finite number. A given
    ``scale`` (static quantization) is used as is; the returned copy is NaN for every group that
    held a non-finite x or had an invalid scale. Computed on the CPU (CUDA torch divides by a
    Python scalar through its reciprocal, which is not the IEEE quotient); q and the scale are
    returned on the device of ``x``, the scale shaped [] / [..., 1] / [..., G] (static: like
    ``scale``). ``smooth`` [K]: the values quantized are ``float(x) * smooth`` (one fp32 product).
    ``symmetric=False``: :func:`quantize_asym_reference`. ``rotate``: the values quantized are
    ``rotate_blocks(float(x))`` (:mod:`tcgemm.rotation`; dynamic symmetric, K a multiple of 128).

    Args:
        x: float [..., K].
        granularity: "tensor", "token" or "group" (ValueError otherwise).
        scale: optional static fp32 scales, one per group of ``granularity``.
        smooth: optional fp32 [K] multipliers of ``x``.
        symmetric: False hands the call to :func:`quantize_asym_reference`.
        zero_point: with ``symmetric=False`` only, the static int32 zero points.
        rotate: rotate the values first (ValueError with ``scale``, ``smooth`` or "tensor").

    Returns:
        ``(q, scale)``: int8 like ``x`` and the fp32 scales, on ``x``'s device.
    """
    if not symmetric:
        return quantize_asym_reference(x, granularity, scale, zero_point, smooth)
    if granularity not in ACTIVATION_GRANULARITIES:
        raise ValueError(f"quantize_reference: unknown granularity {granularity!r}")
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m = math.prod(lead)
    groups = quantize_scale_shape("group", m, k)[1]
    xf = x.detach().cpu().float().reshape(m, k)
    if smooth is not None:
        xf = xf * smooth.detach().cpu().float().reshape(1, k)
    if rotate:
        if scale is not None or smooth is not None or granularity == "tensor":
            raise ValueError("quantize_reference: rotate=True needs dynamic scales per token or group, no smooth")
        xf = rotate_blocks(xf)
    finite = xf.isfinite()

    def per_group(t: torch.Tensor, fill, reduce) -> torch.Tensor:
        """reduce over each group of t [M, K] -> [] / [M, 1] / [M, G]."""
        if granularity == "tensor":
            return reduce(t.reshape(1, -1), 1).reshape(()) if t.numel() else torch.full((), fill, dtype=t.dtype)
        if granularity == "token":
            return reduce(t, 1).reshape(m, 1) if k else torch.full((m, 1), fill, dtype=t.dtype)
        padded = torch.full((m, groups * SCALE_BLOCK), fill, dtype=t.dtype)
        padded[:, :k] = t
        return reduce(padded.reshape(m, groups, SCALE_BLOCK), 2)

    def expand(s: torch.Tensor) -> torch.Tensor:
        """[] / [M, 1] / [M, G] scales -> one per element [M, K]."""
        if granularity == "tensor":
            return s.reshape(1, 1).expand(m, k)
        if granularity == "token":
            return s.reshape(m, 1).expand(m, k)
        return per_element(s.reshape(m, groups), k)

    nonfinite = per_group(~finite, False, lambda t, d: t.any(dim=d))
    if scale is not None:
        s = scale.detach().cpu().float()
        s_grouped = s.reshape(nonfinite.shape)
        s_out = torch.where(nonfinite | ~(s_grouped.isfinite() & (s_grouped > 0)), math.nan, s_grouped)
        s_out = s_out.reshape(scale.shape)
    else:
        amax = per_group(xf.abs().masked_fill(~finite, 0), 0.0, lambda t, d: t.amax(dim=d))
        s = torch.where(amax == 0, torch.ones_like(amax), amax / 127)
        s = torch.where(nonfinite, math.nan, s)
        s_out = s
    s_full = expand(s.reshape(nonfinite.shape))
    valid = finite & s_full.isfinite() & (s_full > 0)
    quotient = torch.where(valid, xf / torch.where(valid, s_full, 1.0), 0.0)
    q = torch.round(quotient).clamp(-127, 127).to(torch.int8).reshape(x.shape)
    if scale is None and granularity != "tensor":
        s_out = s_out.reshape(*lead, s_out.shape[-1])
    return q.to(x.device), s_out.to(x.device)


def quantize_asym_reference(
    x: torch.Tensor,
    granularity: str = "token",
    scale: Optional[torch.Tensor] = None,
    zero_point: Optional[torch.Tensor] = None,
    smooth: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric int8 quantization of ``x`` [..., K], per token (dynamic or static) or per
    tensor (static), defined in plain torch.

    Dynamic, per row: hi = max(0, max x), neg_lo = max(0, max -x) in fp32; scale = (hi + neg_lo)
    / 255 in float64 rounded to fp32, 1.0 where both are 0, NaN where either is not finite;
    zero = round_half_even(fp32(neg_lo / scale)) - 128 clamped to [-128, 127] (0 for an invalid
    scale). Static: the given scale and zero point. q = clamp(round_half_even(fp32(x / scale)),
    -255, 255) + zero, clamped to [-128, 127]; where x is not finite or the scale is invalid,
    q = clamp(zero). The returned copies of static scales are NaN for a row (or the tensor) that
    held a non-finite x, had an invalid scale or a zero point outside [-128, 127]. Returns
    ``(q, scale, zero_point)`` on the device of ``x``.

    Args:
        x: float [..., K].
        granularity: "token" or "tensor" (ValueError otherwise; "tensor" is static only).
        scale: static fp32 scales, one element ("tensor") or one per row ("token"); with
            ``zero_point`` only (ValueError for one without the other).
        zero_point: static int32 zero points, shaped like ``scale``.
        smooth: optional fp32 [K] multipliers of ``x``.
    """
    if granularity not in ("tensor", "token"):
        raise ValueError(f"quantize_asym_reference: granularity must be 'token' or 'tensor', got {granularity!r}")
    if (scale is None) != (zero_point is None) or (scale is None and granularity == "tensor"):
        raise ValueError("quantize_asym_reference: give scale and zero_point together (static); dynamic is per token")
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m = math.prod(lead)
    xf = x.detach().cpu().float().reshape(m, k)
    if smooth is not None:
        xf = xf * smooth.detach().cpu().float().reshape(1, k)
    finite = xf.isfinite()
    rows = 1 if granularity == "tensor" else m
    if scale is None:
        bad = ~finite.all(dim=1, keepdim=True) if k else torch.zeros(m, 1, dtype=torch.bool)
        clean = xf.masked_fill(~finite, 0)
        hi = clean.amax(dim=1, keepdim=True).clamp_min(0) if k else torch.zeros(m, 1)
        neg_lo = (-clean).amax(dim=1, keepdim=True).clamp_min(0) if k else torch.zeros(m, 1)
        s = ((hi.double() + neg_lo.double()) / 255).float()
        s = torch.where((hi == 0) & (neg_lo == 0), 1.0, s)
        s = torch.where(bad, math.nan, s)
        valid_s = s.isfinite() & (s > 0)
        ratio = torch.where(valid_s, neg_lo / torch.where(valid_s, s, 1.0), 0.0)
        z = torch.where(valid_s, torch.round(ratio).clamp(0, 255) - 128, 0.0).to(torch.int32)
        s_out, z_out = s, z
    else:
        s = scale.detach().cpu().float().reshape(rows, 1)
        z = zero_point.detach().cpu().to(torch.int32).reshape(rows, 1)
        valid_s = s.isfinite() & (s > 0)
        bad_rows = ~finite.all(dim=1, keepdim=True) if k else torch.zeros(m, 1, dtype=torch.bool)
        bad = bad_rows.any().reshape(1, 1) if granularity == "tensor" else bad_rows
        bad = bad | ~valid_s | (z < -128) | (z > 127)
        s_out = torch.where(bad, math.nan, s).reshape(scale.shape)
        z_out = zero_point.detach().cpu().to(torch.int32).clone()
    s_full = s.expand(m, 1) if rows == 1 else s
    z_full = z.long().expand(m, 1) if rows == 1 else z.long()
    ok = finite & (s_full.isfinite() & (s_full > 0))
    quotient = torch.where(ok, xf / torch.where(ok, s_full, 1.0), 0.0)
    r = torch.round(quotient).clamp(-255, 255).long()
    q = torch.where(ok, r + z_full, z_full.expand(m, k)).clamp(-128, 127).to(torch.int8).reshape(x.shape)
    if scale is None:
        s_out, z_out = s_out.reshape(*lead, 1), z_out.reshape(*lead, 1)
    return q.to(x.device), s_out.to(x.device), z_out.to(x.device)


def unpack_int4_reference(packed: torch.Tensor, group_scale: Optional[torch.Tensor] = None,
                          zero_point: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The int8 [N, K] weight of a packed 4-bit uint8 [N, K/2], defined in plain torch on the CPU:
    byte j of row n holds k = 2j in its low nibble and k = 2j + 1 in its high nibble, each a
    two's-complement 4-bit integer; with ``group_scale`` (int8 [N, ceil(K/128)]) each value is
    multiplied by ``group_scale[n, k // 128]``; with ``zero_point`` (int8 [N, ceil(K/128)]),
    ``zero_point[n, k // 128]`` is subtracted. Returned on the device of ``packed``."""
    b = packed.detach().cpu().long()
    n, k = b.shape[0], 2 * b.shape[1]
    q = torch.empty(n, k, dtype=torch.int64)
    q[:, 0::2], q[:, 1::2] = b % 16, b // 16
    q = torch.where(q >= 8, q - 16, q)
    if group_scale is not None:
        q = q * per_element(group_scale.detach().cpu().long(), k)
    if zero_point is not None:
        q = q - per_element(zero_point.detach().cpu().long(), k)
    return q.to(torch.int8).to(packed.device)


def int4_gemm_reference(a: torch.Tensor, packed: torch.Tensor,
                        group_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``a @ unpack_int4_reference(packed, group_scale).T`` for int8 ``a`` [M, K] and a packed
    4-bit weight [N, K/2]: exact in int64 on the CPU, then wrapped to int32 [M, N]."""
    return wrap_int32(a.cpu().long() @ unpack_int4_reference(packed, group_scale).cpu().long().t())


def int4_weight_reference(packed: torch.Tensor, weight_scale: torch.Tensor,
                          group_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The float64 [N, K] weight a packed 4-bit weight stands for, on the CPU: two-level
    (``weight_scale`` [N], ``group_scale`` int8 [N, ceil(K/128)]) ``q * group_scale * weight_scale``;
    float groups (``weight_scale`` [N, ceil(K/gs)], gs 128, 64 or 32, told apart by width)
    ``q * weight_scale[n, k // gs]``; ValueError for another width."""
    q = unpack_int4_reference(packed, group_scale).cpu().double()
    n, k = q.shape
    s = weight_scale.detach().cpu().double()
    if group_scale is not None:
        return q * s.reshape(n, 1)
    s = s.reshape(n, -1)
    size = weight_group_size(s.shape[1], k)
    if size is None:
        raise ValueError(f"int4_weight_reference: weight_scale must be [N, ceil(K/gs)] for gs 128, 64 or 32, got "
                         f"{list(weight_scale.shape)} for K = {k}")
    return q * per_element(s, k, size)

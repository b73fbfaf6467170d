"""tcgemm.quantize: int8 quantization (symmetric, or asymmetric with a zero point), with the fake
(meta) implementations beside it."""

from __future__ import annotations

import math
from typing import Optional

import torch

from ._library import typed_error  # loading it loads tcgemm._C, which registers torch.ops.tcgemm
from ._checks import check_args, require_str, require_tensor
from ._scales import quantize_scale_shape

_OP = "tcgemm.quantize"
_QUANTIZE_OP = torch.ops.tcgemm.quantize.default  # looked up once: each lookup in the chain is host time


def quantize(
    x: torch.Tensor,
    granularity: str = "token",
    *,
    scale: Optional[torch.Tensor] = None,
    smooth: Optional[torch.Tensor] = None,
    symmetric: bool = True,
    zero_point: Optional[torch.Tensor] = None,
    rotate: bool = False,
) -> tuple[torch.Tensor, ...]:
    """Symmetric int8 quantization: ``q = clamp(round_half_even(x / scale), -127, 127)``;
    with ``symmetric=False``, asymmetric: ``q = clamp(round_half_even(x / scale) + zero_point,
    -128, 127)``.

    Args:
        x: bf16, fp16 or fp32 ``[..., K]`` (any strides) on the CPU or a CUDA device.
        granularity: "tensor" (one scale), "token" (one per row of K values) or "group" (one per
            row and 128-wide K group; the last group of a row may be short).
        scale: optional fp32 scales to quantize with (static quantization), shaped like the
            returned ones; per tensor any one-element tensor ([], [1] or [1, 1]) is accepted.
            Without it the scales are computed (dynamic): ``amax / 127`` over each group, in
            fp32, and 1.0 where the amax is 0.
        smooth: optional fp32 ``[K]`` per-column multipliers (SmoothQuant): ``x[..., k] *
            smooth[k]``, one fp32 product, is what gets quantized (amax included), in the same
            pass over ``x``.
        symmetric: False for asymmetric quantization, per token (dynamic or static) or per
            tensor (static only). Dynamically the range of a row always holds 0:
            ``hi = max(0, max x)``, ``lo = min(0, min x)``, ``scale = (hi - lo) / 255``
            (computed in fp64, rounded once to fp32; 1.0 for an all-zero row) and
            ``zero_point = round_half_even(-lo / scale) - 128`` in [-128, 127], so 0 is exact.
        zero_point: with ``symmetric=False`` and a static ``scale``: the int32 zero points, shaped
            like ``scale``, each in [-128, 127].
        rotate: quantize ``x R`` instead of ``x``: each block of 128 values of a row times the
            orthonormal Hadamard matrix (:mod:`tcgemm.rotation`), in fp32 in the same pass, the
            amax included, bit for bit ``quantize(rotate_blocks(x.float()), granularity)``.
            Dynamic symmetric scales per "token" or "group" without ``smooth``; K a multiple of 128.

    Returns:
        ``(q, scale)``: int8 ``q`` shaped like ``x``, and fp32 scales shaped ``[]`` (tensor),
        ``[..., 1]`` (token) or ``[..., ceil(K / 128)]`` (group); with a given ``scale``, a copy
        of it in its shape. ``(q, scale, zero_point)`` with ``symmetric=False``, the int32 zero
        points shaped like the scales, and ``(q.float() - zero_point) * scale`` approximates
        ``x``. ``q`` and the scales are bit-identical on the CPU and the GPU and
        equal :func:`tcgemm.reference.quantize_reference`; ``q.float() * scale`` approximates ``x``.

    Bad data (the same rule on the CPU, the GPU and in the reference): NaN and inf never become
    finite values. A group holding a NaN or an inf gets the scale NaN (dynamic) and quantizes to
    zeros, so every output :func:`tcgemm.scaled_gemm` computes from it is NaN; with static scales
    a non-finite x quantizes to 0 and its group's returned scale is NaN. A static scale must be a
    positive finite number: on the CPU anything else raises ``ValueError``; on a GPU (where
    checking would synchronise with the device) its group quantizes to zeros with the returned
    scale NaN. Asymmetric: the same with "zeros" read as "the zero point" (NaN rows get the
    zero point 0), and a static zero point outside [-128, 127] is bad like an invalid scale.

    Example:
        >>> x = torch.randn(4, 256, dtype=torch.bfloat16)
        >>> q, s = tcgemm.quantize(x)                  # per token: s is [4, 1]
        >>> q, s = tcgemm.quantize(x, "group")         # s is [4, 2]
        >>> q2, _ = tcgemm.quantize(x, "group", scale=s)   # static: reuse the scales
    """
    # The common call (a 2-D x, symmetric, arguments of the expected types) in one condition; the
    # checks one by one, each naming its argument, for any other (host time at decode).
    if (type(x) is torch.Tensor and symmetric is True and type(granularity) is str and scale is None
            and smooth is None and zero_point is None and rotate is False and x.dim() == 2):
        try:
            return _QUANTIZE_OP(x, granularity, None, None)
        except RuntimeError as exc:
            raise typed_error(exc) from None
    require_tensor(_OP, "x", x)
    for name, value in (("symmetric", symmetric), ("rotate", rotate)):
        if not isinstance(value, bool):
            raise TypeError(f"{_OP}: argument '{name}' must be a bool, got {type(value).__name__}")
    if rotate and not symmetric:
        raise ValueError(f"{_OP}: rotate=True needs dynamic symmetric scales and no 'smooth'")
    if symmetric and zero_point is not None:
        raise ValueError(f"{_OP}: argument 'zero_point' is used only with symmetric=False")
    if x.dim() == 0:
        raise ValueError(f"{_OP}: argument 'x' must have shape [..., K], got a 0-D tensor")
    if x.dim() == 2:
        return _quantize_2d(x, granularity, scale, smooth, symmetric, zero_point, rotate)
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m = math.prod(lead)

    def rows(t):  # given [..., G] scales or zero points as [M, G] (a wrong shape still reaches the op's check)
        if t is not None and granularity in ("token", "group") and t.dim() == len(lead) + 1:
            return t.reshape(m, t.shape[-1])
        return t

    out = _quantize_2d(x.reshape(m, k), granularity, rows(scale), smooth, symmetric, rows(zero_point), rotate)
    q, rest = out[0].reshape(x.shape), out[1:]
    if scale is not None:  # static: each returned tensor in the shape it was given
        return (q, *(t.reshape(given.shape) for t, given in zip(rest, (scale, zero_point))))
    if granularity != "tensor":
        rest = tuple(t.reshape(*lead, t.shape[-1]) for t in rest)
    return (q, *rest)


def _quantize_2d(x, granularity, scale, smooth, symmetric, zero_point, rotate=False):
    require_str(_OP, "granularity", granularity)
    require_tensor(_OP, "scale", scale, optional=True)
    require_tensor(_OP, "smooth", smooth, optional=True)
    if not symmetric:
        require_tensor(_OP, "zero_point", zero_point, optional=True)
    try:
        if symmetric:
            return _QUANTIZE_OP(x, granularity, scale, smooth, rotate)
        return torch.ops.tcgemm.quantize_asym.default(x, granularity, scale, zero_point, smooth)
    except RuntimeError as exc:
        raise typed_error(exc) from None


@torch.library.register_fake("tcgemm::quantize")
def _quantize_fake(x, granularity, scale=None, smooth=None, rotate=False):
    check_args("quantize", x=x, granularity=granularity, scale=scale, smooth=smooth, rotate=rotate)
    q = x.new_empty(x.shape, dtype=torch.int8)
    if scale is not None:
        return q, torch.empty_like(scale)
    return q, x.new_empty(quantize_scale_shape(granularity, x.shape[0], x.shape[1]), dtype=torch.float32)


@torch.library.register_fake("tcgemm::quantize_asym")
def _quantize_asym_fake(x, granularity, scale=None, zero_point=None, smooth=None):
    check_args("quantize_asym", x=x, granularity=granularity, scale=scale, zero_point=zero_point, smooth=smooth)
    q = x.new_empty(x.shape, dtype=torch.int8)
    if scale is not None:
        return q, torch.empty_like(scale), torch.empty_like(zero_point)
    shape = quantize_scale_shape(granularity, x.shape[0], x.shape[1])
    return q, x.new_empty(shape, dtype=torch.float32), x.new_empty(shape, dtype=torch.int32)

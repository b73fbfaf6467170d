"""tcgemm.quantize: symmetric int8 quantization, with its fake (meta) implementation beside it."""

from __future__ import annotations

import math
from typing import Optional

import torch

from . import _library  # noqa: F401  (loads tcgemm._C, which registers torch.ops.tcgemm)
from ._checks import check_args, require_str, require_tensor
from ._scales import quantize_scale_shape

_OP = "tcgemm.quantize"


def quantize(
    x: torch.Tensor,
    granularity: str = "token",
    *,
    scale: Optional[torch.Tensor] = None,
    smooth: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 quantization: ``q = clamp(round_half_even(x / scale), -127, 127)``.

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

    Returns:
        ``(q, scale)``: int8 ``q`` shaped like ``x``, and fp32 scales shaped ``[]`` (tensor),
        ``[..., 1]`` (token) or ``[..., ceil(K / 128)]`` (group); with a given ``scale``, a copy
        of it in its shape. ``q`` and the scales are bit-identical on the CPU and the GPU and
        equal :func:`tcgemm.reference.quantize_reference`; ``q.float() * scale`` approximates ``x``.

    Bad data (the same rule on the CPU, the GPU and in the reference): NaN and inf never become
    finite values. A group holding a NaN or an inf gets the scale NaN (dynamic) and quantizes to
    zeros, so every output :func:`tcgemm.scaled_gemm` computes from it is NaN; with static scales
    a non-finite x quantizes to 0 and its group's returned scale is NaN. A static scale must be a
    positive finite number: on the CPU anything else raises ``ValueError``; on a GPU (where
    checking would synchronise with the device) its group quantizes to zeros with the returned
    scale NaN.

    Example:
        >>> x = torch.randn(4, 256, dtype=torch.bfloat16)
        >>> q, s = tcgemm.quantize(x)                  # per token: s is [4, 1]
        >>> q, s = tcgemm.quantize(x, "group")         # s is [4, 2]
        >>> q2, _ = tcgemm.quantize(x, "group", scale=s)   # static: reuse the scales
    """
    require_tensor(_OP, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{_OP}: argument 'x' must have shape [..., K], got a 0-D tensor")
    if x.dim() == 2:
        return _quantize_2d(x, granularity, scale, smooth)
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m = math.prod(lead)
    scale_2d = scale
    if scale is not None and granularity in ("token", "group") and scale.dim() == len(lead) + 1:
        scale_2d = scale.reshape(m, scale.shape[-1])  # a wrong shape still reaches the op's check
    q, s = _quantize_2d(x.reshape(m, k), granularity, scale_2d, smooth)
    if scale is not None:
        return q.reshape(x.shape), s.reshape(scale.shape)
    if granularity != "tensor":
        s = s.reshape(*lead, s.shape[-1])
    return q.reshape(x.shape), s


def _quantize_2d(x, granularity, scale, smooth):
    require_str(_OP, "granularity", granularity)
    require_tensor(_OP, "scale", scale, optional=True)
    require_tensor(_OP, "smooth", smooth, optional=True)
    return torch.ops.tcgemm.quantize.default(x, granularity, scale, smooth)


@torch.library.register_fake("tcgemm::quantize")
def _quantize_fake(x, granularity, scale=None, smooth=None):
    check_args("quantize", x=x, granularity=granularity, scale=scale, smooth=smooth)
    q = x.new_empty(x.shape, dtype=torch.int8)
    if scale is not None:
        return q, torch.empty_like(scale)
    return q, x.new_empty(quantize_scale_shape(granularity, x.shape[0], x.shape[1]), dtype=torch.float32)

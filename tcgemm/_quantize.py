"""tcgemm.quantize: symmetric int8 quantization, with its fake (meta) implementation beside it."""

from __future__ import annotations

import math
from typing import Optional

import torch

from . import _ops  # noqa: F401  (loads tcgemm._C, which registers torch.ops.tcgemm)

GRANULARITIES = ("tensor", "token", "group")
GROUP_SIZE = 128
_OP = "tcgemm.quantize"
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def quantize(
    x: torch.Tensor, granularity: str = "token", *, scale: Optional[torch.Tensor] = None
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

    Returns:
        ``(q, scale)``: int8 ``q`` shaped like ``x``, and fp32 scales shaped ``[]`` (tensor),
        ``[..., 1]`` (token) or ``[..., ceil(K / 128)]`` (group). A given ``scale`` is returned
        as is. ``q`` and the scales are bit-identical on the CPU and the GPU and equal
        :func:`tcgemm.reference.quantize_reference`; ``q.float() * scale`` approximates ``x``.

    Example:
        >>> x = torch.randn(4, 256, dtype=torch.bfloat16)
        >>> q, s = tcgemm.quantize(x)                  # per token: s is [4, 1]
        >>> q, s = tcgemm.quantize(x, "group")         # s is [4, 2]
        >>> q2, _ = tcgemm.quantize(x, "group", scale=s)   # static: reuse the scales
    """
    if x.dim() == 0:
        raise ValueError(f"{_OP}: argument 'x' must have shape [..., K], got a 0-D tensor")
    if x.dim() == 2:
        return _quantize_2d(x, granularity, scale)
    lead, k = tuple(x.shape[:-1]), x.shape[-1]
    m = math.prod(lead)
    scale_2d = scale
    if scale is not None and granularity in ("token", "group") and scale.dim() == len(lead) + 1:
        scale_2d = scale.reshape(m, scale.shape[-1])  # a wrong shape still reaches the op's check
    q, s = _quantize_2d(x.reshape(m, k), granularity, scale_2d)
    if scale is not None:
        return q.reshape(x.shape), scale
    if granularity != "tensor":
        s = s.reshape(*lead, s.shape[-1])
    return q.reshape(x.shape), s


def _quantize_2d(x, granularity, scale):
    q, s = torch.ops.tcgemm.quantize.default(x, granularity, scale)
    # The op returns a copy of a given scale (an op output may not alias an input); the caller
    # gets their own tensor back.
    return q, (s if scale is None else scale)


@torch.library.register_fake("tcgemm::quantize")
def _quantize_fake(x, granularity, scale=None):
    """The binding layer's checks (same messages and exception types) and output shapes."""
    torch._check_value(x.dim() == 2, lambda: f"{_OP}: argument 'x' must be a 2-D tensor [M, K], got a {x.dim()}-D tensor")
    torch._check_type(
        x.dtype in _FLOAT_DTYPES,
        lambda: f"{_OP}: argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, got {x.dtype}",
    )
    torch._check_value(
        granularity in GRANULARITIES,
        lambda: f"{_OP}: argument 'granularity' must be one of 'tensor', 'token', 'group'; got '{granularity}'",
    )
    m, k = x.shape
    shape = {"tensor": (), "token": (m, 1), "group": (m, (k + GROUP_SIZE - 1) // GROUP_SIZE)}[granularity]
    q = x.new_empty((m, k), dtype=torch.int8)
    if scale is None:
        return q, x.new_empty(shape, dtype=torch.float32)
    torch._check_type(
        scale.dtype == torch.float32, lambda: f"{_OP}: argument 'scale' must have dtype torch.float32, got {scale.dtype}"
    )
    torch._check_value(
        scale.device == x.device,
        lambda: f"{_OP}: argument 'scale' must be on the same device as 'x' ({x.device}), got {scale.device}",
    )
    if granularity == "tensor":
        torch._check_value(
            scale.numel() == 1 and scale.dim() <= 2,
            lambda: f"{_OP}: argument 'scale' must have one element (shape [], [1] or [1, 1]) for granularity "
            f"'tensor', got shape {list(scale.shape)}",
        )
    else:
        name = "[M, 1]" if granularity == "token" else "[M, ceil(K / 128)]"
        torch._check_value(
            scale.dim() == 2 and scale.shape[0] == shape[0] and scale.shape[1] == shape[1],
            lambda: f"{_OP}: argument 'scale' must have shape {name} = {list(shape)} for granularity "
            f"'{granularity}', got {list(scale.shape)}",
        )
    return q, torch.empty_like(scale)

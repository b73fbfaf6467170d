"""4-bit weights (W4A8): the packed format, its group scales, and round-to-nearest quantization.

    import tcgemm
    packed = tcgemm.pack_int4(q)                      # int8 [N, K] in [-8, 7] -> uint8 [N, K/2]
    packed, scale, group_scale = tcgemm.nn.quantize_weight(w, "channel", bits=4)   # two-level
    packed, scale, _ = tcgemm.nn.quantize_weight(w, "group", bits=4)              # float groups

A 4-bit weight [N, K] (K even) is stored as uint8 [N, K/2]: byte j of row n holds k = 2j in its
low nibble and k = 2j + 1 in its high nibble, each a two's-complement 4-bit integer in [-8, 7].
(On a little-endian machine the bytes of a row viewed as int32 words hold value i of each 8 at
bits 4i, compressed-tensors' ``pack_to_int32`` order; compressed-tensors stores ``q + 8``, so
converting is ``byte ^ 0x88`` on the uint8 view.)

Two formats of scales, per 1x128 group of each output channel along K:

- two-level (``WeightArgs("channel", bits=4)``, what the GEMM runs at W8A8 speed): an fp32
  ``weight_scale`` [N] per channel and an int8 ``group_scale`` [N, ceil(K/128)] with values in
  [1, 16]: ``w = q * group_scale[n, k // 128] * weight_scale[n]``. ``q * group_scale`` lies in
  [-128, 112], an int8 weight with one float scale per channel, so the int32 sums run over all of K.
- float groups (``WeightArgs("group", bits=4)``, checkpoints): an fp32 ``weight_scale``
  [N, ceil(K/128)]: ``w = q * weight_scale[n, k // 128]``.
"""

from __future__ import annotations

from typing import Optional

import torch

from ._scales import SCALE_BLOCK, expand_weight_scale, per_element, scale_blocks

__all__ = ["INT4_MAX", "INT4_MIN", "GROUP_SCALE_MAX", "check_group_scale", "check_packed", "pack_int4",
           "quantize_int4", "int4_grid", "round_to_grid", "unpack_int4_values"]

INT4_MIN, INT4_MAX = -8, 7
# Two-level group scales lie in [1, GROUP_SCALE_MAX]: q * s then fits int8 ([-128, 112]).
GROUP_SCALE_MAX = 16
# The largest |q| of symmetric round-to-nearest: a group's amax maps to it.
_INT4_LEVELS = 7


def _group_table_shape(n: int, k: int) -> tuple[int, int]:
    return (n, scale_blocks(k))


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Packs 4-bit integers two to a byte: int8 ``q`` [N, K] with values in [-8, 7] and K even ->
    uint8 [N, K/2], byte j of a row holding k = 2j in its low nibble and k = 2j + 1 in its high
    nibble. Pure torch, on ``q``'s device; the values are checked on the CPU only (a check on a
    GPU would wait for it).

    Example:
        >>> q = torch.tensor([[1, -2, 7, -8]], dtype=torch.int8)
        >>> tcgemm.pack_int4(q)
        tensor([[225, 135]], dtype=torch.uint8)
    """
    where = "tcgemm.pack_int4"
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"{where}: argument 'q' must be a torch.Tensor, got {type(q).__name__}")
    if q.dim() != 2:
        raise ValueError(f"{where}: argument 'q' must be a 2-D tensor [N, K], got a {q.dim()}-D tensor")
    if q.dtype != torch.int8:
        raise TypeError(f"{where}: argument 'q' must have dtype torch.int8, got {q.dtype}")
    if q.shape[1] % 2:
        raise ValueError(f"{where}: argument 'q' must have an even number of columns K (two values a byte), "
                         f"got shape {list(q.shape)}")
    if q.device.type == "cpu" and q.numel() and (int(q.min()) < INT4_MIN or int(q.max()) > INT4_MAX):
        raise ValueError(f"{where}: argument 'q' must hold values in [{INT4_MIN}, {INT4_MAX}], got values in "
                         f"[{int(q.min())}, {int(q.max())}]")
    nibbles = q.to(torch.int16) & 0xF
    return (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).to(torch.uint8)


def unpack_int4_values(packed: torch.Tensor, group_scale: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The int8 [N, K] values of a packed uint8 [N, K/2] weight (times ``group_scale[n, k // 128]``
    when given), in pure torch on ``packed``'s device; no checks (:func:`check_packed`)."""
    n, k = packed.shape[0], 2 * packed.shape[1]
    b = packed.to(torch.int16)
    nibbles = torch.stack((b & 0xF, b >> 4), dim=-1).reshape(n, k)
    q = nibbles - ((nibbles & 0x8) << 1)  # sign-extend from 4 bits
    if group_scale is not None:
        q = q * per_element(group_scale.to(torch.int16), k)
    return q.to(torch.int8)


def check_packed(where: str, packed: torch.Tensor, n: Optional[int] = None, k: Optional[int] = None,
                 what: str = "argument 'weight'") -> None:
    """ValueError / TypeError naming ``what`` unless ``packed`` is a uint8 [N, K/2] packed weight
    (of a weight [N, K], when ``n`` and ``k`` are given)."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"{where}: {what} must be a torch.Tensor, got {type(packed).__name__}")
    if packed.dim() != 2:
        raise ValueError(f"{where}: {what} must be a 2-D tensor [N, K/2] (packed 4-bit), got a {packed.dim()}-D tensor")
    if packed.dtype != torch.uint8:
        raise TypeError(f"{where}: {what} must have dtype torch.uint8 (packed 4-bit), got {packed.dtype}")
    if n is not None and k is not None and tuple(packed.shape) != (n, k // 2):
        raise ValueError(f"{where}: {what} must have shape [N, K/2] = [{n}, {k // 2}], got {list(packed.shape)}")


def check_group_scale(where: str, group_scale: torch.Tensor, n: int, k: int,
                      what: str = "argument 'weight_group_scale'", values: bool = True) -> None:
    """ValueError / TypeError naming ``what`` unless ``group_scale`` is the int8 [N, ceil(K/128)]
    table of two-level scales of a weight [N, K], with (``values=True``, which reads a GPU
    tensor's values back to the host) every value in [1, 16].

    Example:
        >>> check_group_scale("QuantLinear", layer.weight_group_scale, 4096, 14336)
    """
    if not isinstance(group_scale, torch.Tensor):
        raise TypeError(f"{where}: {what} must be a torch.Tensor, got {type(group_scale).__name__}")
    if group_scale.dtype != torch.int8:
        raise TypeError(f"{where}: {what} must have dtype torch.int8, got {group_scale.dtype}")
    shape = _group_table_shape(n, k)
    if tuple(group_scale.shape) != shape:
        raise ValueError(f"{where}: {what} must have shape [N, ceil(K/128)] = {list(shape)}, "
                         f"got {list(group_scale.shape)}")
    if values and group_scale.numel():
        lo, hi = int(group_scale.min()), int(group_scale.max())
        if lo < 1 or hi > GROUP_SCALE_MAX:
            raise ValueError(f"{where}: {what} must hold values in [1, {GROUP_SCALE_MAX}], got values in [{lo}, {hi}]")


def _group_amax(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """max |w| over each 1x128 group of each row (non-finite values left out) as fp32 [N, G], and
    whether each group holds a value that is not finite."""
    n, k = w.shape
    groups = scale_blocks(k)
    finite = w.isfinite()
    pad = groups * SCALE_BLOCK - k
    a = torch.nn.functional.pad(w.abs().masked_fill(~finite, 0), (0, pad))
    bad = torch.nn.functional.pad(~finite, (0, pad))
    return a.view(n, groups, SCALE_BLOCK).amax(dim=2).float(), bad.view(n, groups, SCALE_BLOCK).any(dim=2)


def int4_grid(w: torch.Tensor, two_level: bool) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """The scales of symmetric 4-bit round-to-nearest for a float weight [N, K] (computed in fp32
    on ``w``'s device), and the step of the grid of each element.

    Per 1x128 group g of row n the ideal scale is ``f = amax_g / 7``.

    - Two-level (``two_level=True``): the channel scale ``c = max_g f / 16`` (1.0 for a zero row)
      and the group scales ``s_g = clamp(round(f / c), 1, 16)``; the step is ``c * s_g``.
    - Float groups: the scale is ``f`` (1.0 for a zero group); the step is that scale.

    A group holding NaN or inf gets the scale NaN (two-level: its channel scale NaN and its group
    scale 1), as ``tcgemm.quantize`` does for an int8 group.

    Returns:
        ``(weight_scale, group_scale, step)``: fp32 [N] and int8 [N, ceil(K/128)] (two-level), or
        fp32 [N, ceil(K/128)] and None (float groups); and the fp32 step [N, K].
    """
    n, k = w.shape
    amax, bad = _group_amax(w)
    # A tensor divisor: CUDA divides by a Python scalar through its reciprocal, not the IEEE quotient.
    f = amax / amax.new_full((), _INT4_LEVELS)
    if not two_level:
        scale = torch.where(amax > 0, f, torch.ones_like(f)).masked_fill(bad, float("nan"))
        return scale, None, expand_weight_scale(scale, n, k, "group")
    c = f.amax(dim=1) / GROUP_SCALE_MAX if k else torch.zeros(n, device=w.device)
    c = torch.where(c > 0, c, torch.ones_like(c))
    ratio = f / c[:, None]
    group_scale = torch.where(ratio.isfinite(), torch.round(ratio), 1.0).clamp(1, GROUP_SCALE_MAX).to(torch.int8)
    c = c.masked_fill(bad.any(dim=1), float("nan"))
    step = c[:, None] * per_element(group_scale.float(), k)
    return c, group_scale, step


def round_to_grid(w: torch.Tensor, step: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """``clamp(round_half_even(w / step), lo, hi)`` as int8, in fp32; 0 where ``w`` or the step
    is not finite."""
    quotient = w.float() / step
    quotient = torch.where(quotient.isfinite(), quotient, 0.0)
    return torch.round(quotient).clamp(lo, hi).to(torch.int8)


def quantize_int4(w: torch.Tensor, two_level: bool) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Symmetric 4-bit round-to-nearest of a float weight [N, K] (K even) with the scales of
    :func:`int4_grid`: ``q = clamp(round_half_even(w / step), -8, 7)``, packed.

    Returns:
        ``(packed, weight_scale, group_scale)``: uint8 [N, K/2], fp32 scales, the int8 group
        scales (two-level) or None.
    """
    scale, group_scale, step = int4_grid(w, two_level)
    return pack_int4(round_to_grid(w, step, INT4_MIN, INT4_MAX)), scale, group_scale

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
  [N, ceil(K/128)]: ``w = q * weight_scale[n, k // 128]``; symmetric ones also per group of 64 or
  32 inputs (``WeightArgs("group", bits=4, group_size=32)``, the presets "w4a8-group64" and
  "w4a8-group32"): ``weight_scale`` [N, ceil(K/gs)] in fp32, bf16 or fp16 (read as fp32, exactly),
  ``w = q * weight_scale[n, k // gs]``. ``tcgemm.quant_linear`` reads the group size off the
  table's width; at more than :data:`GROUPED_KERNEL_ROWS` rows on a GPU :class:`tcgemm.QuantLinear`
  computes such a layer by phases instead (:func:`grouped_linear_by_phases`).
"""

from __future__ import annotations

from typing import Optional

import torch

from ._ops import _OPS
from ._scales import (INT4_GROUP_SIZES, SCALE_BLOCK, expand_weight_scale, groups_of, int4_scale_dtypes, per_element,
                      scale_blocks)

__all__ = ["INT4_MAX", "INT4_MIN", "GROUP_SCALE_MAX", "GROUPED_KERNEL_ROWS", "check_group_scale", "check_packed",
           "check_zero_point", "check_weight_scale", "pack_int4",
           "quantize_int4", "quantize_int4_asymmetric", "INT4_GRIDS", "int4_grid", "round_to_grid",
           "factor_group_scales", "grouped_linear_by_phases"]

INT4_MIN, INT4_MAX = -8, 7
# Two-level group scales lie in [1, GROUP_SCALE_MAX]: q * s then fits int8 ([-128, 112]).
GROUP_SCALE_MAX = 16
# The largest |q| of symmetric round-to-nearest: a group's amax maps to it.
_INT4_LEVELS = 7


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """Packs 4-bit integers two to a byte: int8 ``q`` [N, K] with values in [-8, 7] and K even ->
    uint8 [N, K/2], byte j of a row holding k = 2j in its low nibble and k = 2j + 1 in its high
    nibble. Pure torch, on ``q``'s device; the values are checked on the CPU only (a check on a
    GPU would wait for it).

    Args:
        q: int8 [N, K], K even, values in [-8, 7].

    Raises:
        TypeError: ``q`` is not a tensor, or not int8.
        ValueError: ``q`` is not 2-D, K is odd, or (CPU tensors) a value lies outside [-8, 7].

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


def check_packed(where: str, packed: torch.Tensor, n: Optional[int] = None, k: Optional[int] = None,
                 what: str = "argument 'weight'") -> None:
    """ValueError / TypeError naming ``what`` unless ``packed`` is a uint8 [N, K/2] packed weight
    (of a weight [N, K], when ``n`` and ``k`` are given).

    Args:
        where: the caller's name, the prefix of the error messages.
        packed: the tensor to check.
        n: the weight's rows N, or None (shape not checked).
        k: the weight's columns K, or None (shape not checked).
        what: how the messages name ``packed``.

    Raises:
        TypeError: ``packed`` is not a tensor, or not uint8.
        ValueError: ``packed`` is not 2-D, or (``n`` and ``k`` given) not [N, K/2].
    """
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

    Args:
        where: the caller's name, the prefix of the error messages.
        group_scale: the tensor to check.
        n: the weight's rows N.
        k: the weight's columns K.
        what: how the messages name ``group_scale``.
        values: also check the values (a host synchronisation for a GPU tensor).

    Raises:
        TypeError: ``group_scale`` is not a tensor, or not int8.
        ValueError: its shape is not [N, ceil(K/128)], or (``values``) a value lies outside [1, 16].

    Example:
        >>> check_group_scale("QuantLinear", layer.weight_group_scale, 4096, 14336)
    """
    _check_group_table(where, group_scale, n, k, what, values, 1, GROUP_SCALE_MAX)


def check_zero_point(where: str, zero_point: torch.Tensor, n: int, k: int,
                     what: str = "argument 'weight_zero_point'", values: bool = True) -> None:
    """As :func:`check_group_scale`, for the int8 [N, ceil(K/128)] zero points of asymmetric 4-bit
    weights: values in [-8, 7].

    Args:
        where: the caller's name, the prefix of the error messages.
        zero_point: the tensor to check.
        n: the weight's rows N.
        k: the weight's columns K.
        what: how the messages name ``zero_point``.
        values: also check the values (a host synchronisation for a GPU tensor).

    Raises:
        TypeError: ``zero_point`` is not a tensor, or not int8.
        ValueError: its shape is not [N, ceil(K/128)], or (``values``) a value lies outside [-8, 7].

    Example:
        >>> check_zero_point("QuantLinear", layer.weight_zero_point, 4096, 14336)
    """
    _check_group_table(where, zero_point, n, k, what, values, INT4_MIN, INT4_MAX)


def _check_group_table(where: str, t: torch.Tensor, n: int, k: int, what: str, values: bool, low: int,
                       high: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where}: {what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.int8:
        raise TypeError(f"{where}: {what} must have dtype torch.int8, got {t.dtype}")
    shape = (n, scale_blocks(k))
    if tuple(t.shape) != shape:
        raise ValueError(f"{where}: {what} must have shape [N, ceil(K/128)] = {list(shape)}, got {list(t.shape)}")
    if values and t.numel():
        lo, hi = int(t.min()), int(t.max())
        if lo < low or hi > high:
            raise ValueError(f"{where}: {what} must hold values in [{low}, {high}], got values in [{lo}, {hi}]")


def _group_amax(w: torch.Tensor, size: int = SCALE_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """max |w| over each 1 x ``size`` group of each row (non-finite values left out) as fp32 [N, G],
    and whether each group holds a value that is not finite."""
    n, k = w.shape
    groups = groups_of(k, size)
    finite = w.isfinite()
    pad = groups * size - k
    a = torch.nn.functional.pad(w.abs().masked_fill(~finite, 0), (0, pad))
    bad = torch.nn.functional.pad(~finite, (0, pad))
    return a.view(n, groups, size).amax(dim=2).float(), bad.view(n, groups, size).any(dim=2)


# The grids int4_grid chooses from: "amax" maps each group's max |w| to 7; "mse" searches the
# scales for the least (importance-weighted) squared error of each group and channel.
INT4_GRIDS = ("mse", "amax")
# Float group scales under the "mse" grid: the scale amax / 7 * ratio of the group's least error.
_GROUP_RATIOS = tuple(1.0 - 0.025 * i for i in range(21))  # 1.0 .. 0.5
# Two-level scales under the "mse" grid: the channel scale max_g(amax_g / 7) / 16 * ratio of the
# channel's least error, each group scale in [1, 16] the one of its group's least error.
_CHANNEL_RATIOS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7)
_GROUP_SCALE_CANDIDATES = 9
# Rows searched together: about 2^18 values (1 MiB of fp32) per temporary on the CPU.
_SEARCH_VALUES_CPU = 1 << 18
_SEARCH_VALUES_GPU = 1 << 26


def _groups(w: torch.Tensor, size: int = SCALE_BLOCK) -> torch.Tensor:
    """fp32 [N, G, size] view of w [N, K] zero-padded to whole 1 x ``size`` groups, non-finite values as 0."""
    n, k = w.shape
    groups = groups_of(k, size)
    w = w.float()
    w = torch.where(w.isfinite(), w, 0.0)
    return torch.nn.functional.pad(w, (0, groups * size - k)).view(n, groups, size)


def _group_error(wg: torch.Tensor, importance: Optional[torch.Tensor], step: torch.Tensor) -> torch.Tensor:
    """sum over each group of ``importance * (w - step * clamp(round(w / step), -8, 7))^2`` for
    groups ``wg`` [R, G, 128] on steps ``step`` [R, G] (> 0): fp32 [R, G]."""
    d = step.unsqueeze(2)
    e = torch.div(wg, d).round_().clamp_(INT4_MIN, INT4_MAX).mul_(d).sub_(wg).square_()
    if importance is not None:
        e = e.mul_(importance)
    return e.sum(dim=2)


def _search_rows(w: torch.Tensor) -> int:
    """Rows of groups ``w`` [N, G, 128] searched at once (temporaries of a bounded size)."""
    per_row = max(1, w.shape[1] * w.shape[2])
    budget = _SEARCH_VALUES_CPU if w.device.type == "cpu" else _SEARCH_VALUES_GPU
    return max(1, budget // per_row)


def _mse_group_scales(wg: torch.Tensor, importance: Optional[torch.Tensor], f: torch.Tensor) -> torch.Tensor:
    """Float group scales of the least error: per group ``f * r`` over ``r`` in _GROUP_RATIOS
    (the first, the largest, on ties); ``f`` [N, G] > 0."""
    out = torch.empty_like(f)
    rows = _search_rows(wg)
    for r0 in range(0, wg.shape[0], rows):
        g, fr = wg[r0:r0 + rows], f[r0:r0 + rows]
        best_err = best = None
        for ratio in _GROUP_RATIOS:
            step = fr * ratio
            err = _group_error(g, importance, step)
            if best is None:
                best_err, best = err, step
            else:
                better = err < best_err
                best_err, best = torch.where(better, err, best_err), torch.where(better, step, best)
        out[r0:r0 + g.shape[0]] = best
    return out


def _mse_two_level_scales(wg: torch.Tensor, importance: Optional[torch.Tensor], f: torch.Tensor,
                          c_max: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-level scales of the least error: per channel ``c = c_max * r`` over ``r`` in
    _CHANNEL_RATIOS, and given ``c`` per group the integer ``s`` in [1, 16] of the least error
    among _GROUP_SCALE_CANDIDATES from ``ceil(f / c)`` down (the smallest on ties); the channel
    takes the ``c`` whose groups' errors sum least (the first on ties). ``c_max`` [N] > 0.
    Returns fp32 ``c`` [N] and the integer ``s`` [N, G] as fp32."""
    n, groups = wg.shape[:2]
    c_out = torch.empty_like(c_max)
    s_out = torch.empty(n, groups, dtype=torch.float32, device=wg.device)
    rows = _search_rows(wg)
    for r0 in range(0, n, rows):
        g, cm, fr = wg[r0:r0 + rows], c_max[r0:r0 + rows], f[r0:r0 + rows]
        best_total = best_c = best_s = None
        for ratio in _CHANNEL_RATIOS:
            c = cm * ratio
            # The group scales from ceil(f / c) down (f / c: the "amax" grid's, unrounded), a
            # window of _GROUP_SCALE_CANDIDATES: a larger scale clips nothing more and rounds
            # more coarsely; one under half of f / c clips most of the group.
            top = torch.ceil(fr / c[:, None]).clamp_(1, GROUP_SCALE_MAX)
            err_s = s_s = None
            for i in range(_GROUP_SCALE_CANDIDATES):
                s = (top - i).clamp_(min=1)
                err = _group_error(g, importance, c[:, None] * s)
                if err_s is None:
                    err_s, s_s = err, s
                else:
                    better = err <= err_s  # ties: the smaller scale (1 for a zero group)
                    err_s, s_s = torch.where(better, err, err_s), torch.where(better, s, s_s)
            total = err_s.sum(dim=1)
            if best_total is None:
                best_total, best_c, best_s = total, c, s_s
            else:
                better = total < best_total
                best_total = torch.where(better, total, best_total)
                best_c, best_s = torch.where(better, c, best_c), torch.where(better[:, None], s_s, best_s)
        c_out[r0:r0 + g.shape[0]], s_out[r0:r0 + g.shape[0]] = best_c, best_s
    return c_out, s_out


def _check_grid(where: str, grid: str) -> str:
    if grid not in INT4_GRIDS:
        raise ValueError(f"{where}: argument 'grid' must be one of {', '.join(map(repr, INT4_GRIDS))}, got {grid!r}")
    return grid


def int4_grid(w: torch.Tensor, two_level: bool, grid: str = "amax", importance: Optional[torch.Tensor] = None,
              group_size: int = SCALE_BLOCK) -> tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor]:
    """The scales of symmetric 4-bit quantization of a float weight [N, K] (computed in fp32 on
    ``w``'s device), and the step of the grid of each element.

    Per 1x128 group g of row n (float groups: 1 x ``group_size``) let ``f = amax_g / 7``.

    ``grid="amax"`` (each group's max |w| on the grid's largest level):

    - Two-level (``two_level=True``): the channel scale ``c = max_g f / 16`` (1.0 for a zero row)
      and the group scales ``s_g = clamp(round(f / c), 1, 16)``; the step is ``c * s_g``.
    - Float groups: the scale is ``f`` (1.0 for a zero group); the step is that scale.

    ``grid="mse"`` (the scales of the least squared error of round-to-nearest, each value's error
    weighted by ``importance`` of its column when given): searched over candidates that include
    the ``"amax"`` scales, so no group (float) or channel (two-level) has a larger error.

    - Two-level: the channel scale ``c = max_g f / 16 * r`` for ``r`` in 1.0, 0.95, ..., 0.7
      (clipping the largest groups), and for each ``c`` the group scale of the group's least
      error among the 9 from ``ceil(f / c)`` down (in [1, 16]); the channel keeps the ``c`` of
      the least total error.
    - Float groups: the scale ``f * r`` for ``r`` in 1.0, 0.975, ..., 0.5 of the group's least error.

    A group holding NaN or inf gets the scale NaN (two-level: its channel scale NaN and its group
    scale 1), as ``tcgemm.quantize`` does for an int8 group; the search leaves its non-finite
    values out.

    Args:
        w: the float weight [N, K].
        two_level: two-level scales, else float group scales.
        grid: ``"amax"`` or ``"mse"``.
        importance: with ``"mse"``, a weight >= 0 per input column, fp32 [K] (e.g. the diagonal
            of the input's second moments, ``E[x_k^2]``); None weighs every value alike.
        group_size: float groups: the inputs per scale, 128, 64 or 32 (two-level: 128 only;
            ValueError otherwise).

    Returns:
        ``(weight_scale, group_scale, step)``: fp32 [N] and int8 [N, ceil(K/128)] (two-level), or
        fp32 [N, ceil(K/group_size)] and None (float groups); and the fp32 step [N, K].
    """
    n, k = w.shape
    _check_grid("tcgemm.int4.int4_grid", grid)
    if group_size not in INT4_GROUP_SIZES or (two_level and group_size != SCALE_BLOCK):
        raise ValueError(f"tcgemm.int4.int4_grid: argument 'group_size' must be 128 with two-level scales, and 128, "
                         f"64 or 32 with float group scales, got {group_size!r} (two_level={two_level})")
    amax, bad = _group_amax(w, group_size)
    # A tensor divisor: CUDA divides by a Python scalar through its reciprocal, not the IEEE quotient.
    f = amax / amax.new_full((), _INT4_LEVELS)
    mse = grid == "mse" and k > 0
    if mse:
        wg = _groups(w, group_size)
        if importance is not None:
            importance = torch.nn.functional.pad(importance.detach().to(device=w.device, dtype=torch.float32),
                                                 (0, wg.shape[1] * group_size - k)).view(wg.shape[1], group_size)
    if not two_level:
        positive = amax > 0
        if mse:
            f = _mse_group_scales(wg, importance, torch.where(positive, f, torch.ones_like(f)))
        scale = torch.where(positive, f, torch.ones_like(f)).masked_fill(bad, float("nan"))
        return scale, None, expand_weight_scale(scale, n, k, "group", group_size)
    c = f.amax(dim=1) / GROUP_SCALE_MAX if k else torch.zeros(n, device=w.device)
    c = torch.where(c > 0, c, torch.ones_like(c))
    if mse:
        c, s = _mse_two_level_scales(wg, importance, f, c)
        group_scale = s.to(torch.int8)  # 1 for a zero group (every scale has error 0)
    else:
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


def quantize_int4(w: torch.Tensor, two_level: bool, grid: str = "amax", importance: Optional[torch.Tensor] = None,
                  group_size: int = SCALE_BLOCK) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Symmetric 4-bit round-to-nearest of a float weight [N, K] (K even) with the scales of
    :func:`int4_grid` (``grid``, ``importance``, ``group_size``: see there):
    ``q = clamp(round_half_even(w / step), -8, 7)``, packed.

    Args:
        w: the float weight [N, K], K even (:func:`pack_int4` raises ValueError otherwise).
        two_level: two-level scales (fp32 per channel, int8 per group), else fp32 group scales.
        grid: ``"amax"`` or ``"mse"`` (ValueError otherwise).
        importance: with ``"mse"``, fp32 [K] weights of the columns' errors, or None.
        group_size: the inputs per float group scale: 128, 64 or 32 (two-level: 128).

    Returns:
        ``(packed, weight_scale, group_scale)``: uint8 [N, K/2], fp32 scales ([N] two-level, [N,
        ceil(K/group_size)] float groups), the int8 group scales (two-level) or None.
    """
    scale, group_scale, step = int4_grid(w, two_level, grid, importance, group_size)
    return pack_int4(round_to_grid(w, step, INT4_MIN, INT4_MAX)), scale, group_scale


def quantize_int4_asymmetric(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit round-to-nearest of a float weight [N, K] (K even) per 1x128 group, as
    llm-compressor's min-max observer does it: with ``lo = min(min_g w, 0)`` and ``hi = max(max_g
    w, 0)``, ``scale = (hi - lo) / 15`` (1.0 for a zero group), ``zero_point = clamp(round(-8 -
    lo / scale), -8, 7)`` and ``q = clamp(round(w / scale) + zero_point, -8, 7)`` (half to even),
    so that ``w ~ scale * (q - zero_point)``.

    Returns:
        ``(packed, scale, zero_point)``: uint8 [N, K/2], fp32 [N, ceil(K/128)], int8 [N, ceil(K/128)].
    """
    n, k = w.shape
    wg = _groups(w)
    lo, hi = wg.amin(dim=2).clamp(max=0.0), wg.amax(dim=2).clamp(min=0.0)
    scale = (hi - lo) / (INT4_MAX - INT4_MIN)
    scale = torch.where(scale > 0, scale, 1.0)
    zero = torch.round(INT4_MIN - lo / scale).clamp(INT4_MIN, INT4_MAX)
    q = torch.round(wg / scale[..., None]) + zero[..., None]
    q = q.clamp(INT4_MIN, INT4_MAX).view(n, -1)[:, :k].to(torch.int8)
    return pack_int4(q), scale, zero.to(torch.int8)


def _neighbours(c: torch.Tensor, ulps: int = 2) -> list[torch.Tensor]:
    """``c`` and its fp32 neighbours up to ``ulps`` units in the last place either side, nearest first."""
    out, up, down = [c], c, c
    for _ in range(ulps):
        up, down = torch.nextafter(up, torch.full_like(c, float("inf"))), torch.nextafter(down, torch.zeros_like(c))
        out += [up, down]
    return out


def factor_group_scales(scale: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """Two-level scales that give exactly these float group scales, if there are any: a channel
    scale ``c`` fp32 [N] and integers ``s`` in [1, 16] int8 [N, G] with ``c[n] * s[n, g]`` (in fp32)
    equal to ``scale[n, g]`` bit for bit; None where a row has none.

    Per row the candidates are ``c = max_g scale / t`` for t = 16, 15, ..., 1 and their fp32
    neighbours; the first that reproduces every group wins. The ``"amax"`` grid's rows (largest
    group scale 16), and the ``"mse"`` ones as :func:`tcgemm.quantize_weight` gives them (it takes
    this factoring of its products), factor back into the very ``c`` and ``s`` they were saved
    from (:func:`tcgemm.compressed.save_compressed`); another pair with the same products would
    give int32 sums that differ, and outputs that agree to fp32 rounding.

    Args:
        scale: fp32 [N, G] float group scales; any value that is not finite and > 0 gives None.

    Example:
        >>> c, s = factor_group_scales(layer.weight_scale[:, None] * layer.weight_group_scale.float())
    """
    scale = scale.detach().float()
    if scale.dim() != 2 or scale.numel() == 0 or not bool(((scale > 0) & scale.isfinite()).all()):
        return None
    n = scale.shape[0]
    top = scale.amax(dim=1)
    channel = torch.zeros(n, dtype=torch.float32, device=scale.device)
    group = torch.zeros(scale.shape, dtype=torch.int8, device=scale.device)
    found = torch.zeros(n, dtype=torch.bool, device=scale.device)
    for t in range(GROUP_SCALE_MAX, 0, -1):
        for c in _neighbours(top / t):  # c * t may round to the max from a neighbour of max / t
            s = torch.round(scale / c[:, None]).clamp_(1, GROUP_SCALE_MAX)
            take = ~found & (c[:, None] * s == scale).all(dim=1)
            channel = torch.where(take, c, channel)
            group = torch.where(take[:, None], s.to(torch.int8), group)
            found |= take
    return (channel, group) if bool(found.all()) else None


def check_weight_scale(where: str, scale: torch.Tensor, n: int, k: int, group_size: int = SCALE_BLOCK,
                       what: str = "argument 'weight_scale'") -> None:
    """ValueError / TypeError naming ``what`` unless ``scale`` is the [N, ceil(K/group_size)] table
    of float group scales of a 4-bit weight [N, K] (groups of 64 or 32: fp32, bf16 or fp16; of 128:
    any dtype, which loading converts). ``tcgemm.quant_linear`` reads the group size off the
    table's width, so a table of another group size would run, wrongly: a layer checks its table
    where it enters (``load_state_dict``, assignment).

    Args:
        where: the caller's name, the prefix of the error messages.
        scale: the tensor to check.
        n: the weight's rows N.
        k: the weight's columns K.
        group_size: the inputs per scale, 128, 64 or 32.
        what: how the messages name ``scale``.

    Raises:
        TypeError: ``scale`` is not a tensor, or (groups of 64 or 32) of another dtype.
        ValueError: its shape is not [N, ceil(K/group_size)].

    Example:
        >>> check_weight_scale("QuantLinear", layer.weight_scale, 4096, 14336, 32)
    """
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{where}: {what} must be a torch.Tensor, got {type(scale).__name__}")
    shape = (n, groups_of(k, group_size))
    if tuple(scale.shape) != shape:
        raise ValueError(f"{where}: {what} must have shape [N, ceil(K/{group_size})] = {list(shape)} (scales per "
                         f"group of {group_size} inputs), got {list(scale.shape)}")
    if group_size != SCALE_BLOCK and scale.dtype not in (dtypes := int4_scale_dtypes(k, group_size)):
        raise TypeError(f"{where}: {what} must have dtype {' or '.join(', '.join(map(str, dtypes)).rsplit(', ', 1))} "
                        f"(scales per group of {group_size} inputs, K = {k}), got {scale.dtype}")


def float_group_size(layer) -> int:
    """The group size of a :class:`tcgemm.QuantLinear` with 4-bit weights and float group scales
    (128, 64 or 32: its ``weight_scale`` is [N, ceil(K/group_size)]), else 0.

    Args:
        layer: the :class:`tcgemm.QuantLinear` (or one being built: 0 until it has its scheme).
    """
    scheme = layer.__dict__.get("scheme")  # None while the layer is built
    weights = None if scheme is None else scheme.weights
    return weights.group_size if weights is not None and weights.bits == 4 and weights.granularity == "group" else 0


def check_int4_state(layer, state_dict, prefix, *args) -> None:
    """The ``load_state_dict`` pre-hook of a 4-bit :class:`tcgemm.QuantLinear`: the packed weight
    is uint8 [N, K/2], the group scales int8 [N, ceil(K/128)] in [1, 16], the zero points int8
    [N, ceil(K/128)] in [-8, 7] (load_state_dict would cast other dtypes silently), and float group
    scales [N, ceil(K/group_size)] (another width reads as another group size; per 64 or 32 inputs
    the layer's table takes the loaded one's dtype, fp32, bf16 or fp16).

    Args:
        layer: the 4-bit :class:`tcgemm.QuantLinear` loading.
        state_dict: the state dict it loads.
        prefix: its name's prefix in ``state_dict``.
        args: the hook's other arguments (unused).
    """
    where = "QuantLinear.load_state_dict"
    n, k, size = layer.out_features, layer.in_features, float_group_size(layer)
    weight, scale = state_dict.get(prefix + "weight"), state_dict.get(prefix + "weight_scale")
    if weight is not None:
        check_packed(where, weight, n, k, what=f"'{prefix}weight'")
    if scale is not None and size:
        check_weight_scale(where, scale, n, k, size, what=f"'{prefix}weight_scale'")
        if size != SCALE_BLOCK and layer.weight_scale.dtype != scale.dtype:  # load_state_dict's copy_ would convert
            layer._buffers["weight_scale"] = layer.weight_scale.to(scale.dtype)
    for name, check in (("weight_group_scale", check_group_scale), ("weight_zero_point", check_zero_point)):
        table = state_dict.get(prefix + name)
        if table is not None and layer._buffers.get(name) is not None:
            check(where, table, n, k, what=f"'{prefix}{name}'")


# Rows above which tcgemm.QuantLinear computes a 4-bit layer with fp32 scales per 64 or 32 inputs
# on a GPU by phases of GEMMs with scales per 128 inputs (grouped_linear_by_phases): the op runs
# such weights on its few-rows kernel at any number of rows, in 128 / group_size slot rows per row
# of x, so its time grows with the rows from about 16 on, while the phases cost one unpacking and
# 128 / group_size GEMMs (docs/design/int4.md, "Groups of 32 and 64").
GROUPED_KERNEL_ROWS = 128

_UNPACK_INT4 = _OPS["unpack_int4"]  # looked up once: host time per call


def grouped_linear_by_phases(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, group_size: int,
                             bias: Optional[torch.Tensor] = None, activation: str = "token",
                             **options) -> torch.Tensor:
    """``tcgemm.quant_linear(x, weight, weight_scale, bias, activation, **options)`` for a packed
    4-bit ``weight`` [N, K/2] with float ``weight_scale`` [N, ceil(K/group_size)], group_size 64 or
    32, computed by S = 128 / group_size GEMMs of scales per 128 inputs, which the GPU's tiled
    kernels run at many rows.

    x is quantized once (:func:`tcgemm.quantize`, as the op quantizes it) and the weight unpacked
    to int8 once; phase p (0 <= p < S) multiplies the int8 x holding only the columns whose group
    g = k // group_size has g % S == p (the others zero) by that weight, with the scales
    ``weight_scale[n, S * b + p]`` per 128-wide K block b (1.0 where the last block has no such
    group). Each block of a phase then sums one group, exactly in int32, promoted with its own
    scale: every phase is exact per group with the semantics of groups of 128. The S outputs
    (fp32) are summed in phase order, the bias added in fp32, and the result cast to ``x.dtype``:
    the op's result up to the order of the fp32 sums.

    Args:
        x: [..., K] bf16, fp16 or fp32.
        weight: uint8 [N, K/2], packed 4-bit (:func:`pack_int4`).
        weight_scale: fp32, bf16 or fp16 [N, ceil(K/group_size)] (converted to fp32, exactly).
        group_size: 64 or 32 (ValueError otherwise).
        bias: optional [N], added in fp32.
        activation: the activations, as for ``tcgemm.quant_linear`` ("token", "block" or "static").
        options: keywords of ``tcgemm.quant_linear`` for the quantization of x (``input_scale``,
            ``smooth``, ``rotate``).

    Returns:
        [..., N] of ``x.dtype``.
    """
    from ._ops import scaled_gemm  # noqa: PLC0415  (tcgemm._ops imports this module)
    from ._quantize import quantize  # noqa: PLC0415

    if group_size not in INT4_GROUP_SIZES or group_size == SCALE_BLOCK:
        raise ValueError(f"tcgemm.int4.grouped_linear_by_phases: argument 'group_size' must be 64 or 32, "
                         f"got {group_size!r}")
    granularity = {"token": "token", "block": "group", "static": "tensor"}.get(activation)
    if granularity is None:
        raise ValueError(f"tcgemm.int4.grouped_linear_by_phases: argument 'activation' must be 'token', 'block' or "
                         f"'static', got {activation!r}")
    k, n = x.shape[-1], weight.shape[0]
    phases = SCALE_BLOCK // group_size
    blocks = scale_blocks(k)
    qx, sx = quantize(x.reshape(-1, k), granularity, scale=options.get("input_scale"), smooth=options.get("smooth"),
                      rotate=bool(options.get("rotate", False)))
    w8t = _UNPACK_INT4(weight, None, None).t()
    # [N, blocks, S]: the scale of phase p in K block b, 1.0 past the last group.
    table = torch.nn.functional.pad(weight_scale.float(), (0, blocks * phases - weight_scale.shape[1]), value=1.0)
    table = table.view(n, blocks, phases)
    phase_of = torch.arange(k, device=x.device) // group_size % phases
    out = None
    for p in range(phases):
        y = scaled_gemm(qx.masked_fill(phase_of != p, 0), w8t, sx, table[:, :, p].contiguous(), out_dtype=torch.float32)
        out = y if out is None else out + y
    if bias is not None:
        out = out + bias.float()
    return out.to(x.dtype).reshape(*x.shape[:-1], n)

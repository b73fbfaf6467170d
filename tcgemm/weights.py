"""Weight quantization: an ``nn.Linear`` weight to int8 or packed 4-bit with its scales, by
rounding to nearest or by GPTQ (:mod:`tcgemm.gptq`).

    q, scale = tcgemm.weights.quantize_weight(linear.weight, "channel")                  # int8, fp32 [N]
    packed, scale, group_scale = tcgemm.weights.quantize_weight(linear.weight, bits=4)   # W4A8
    packed, scale, _ = tcgemm.weights.quantize_weight(linear.weight, "group", bits=4, group_size=32)
    packed, scale, _ = tcgemm.weights.quantize_weight(linear.weight, "group", bits=4, group_size=32,
                                                      scale_dtype=torch.bfloat16)          # bf16 scales
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ._quantize import quantize
from ._scales import INT4_GROUP_SCALE_DTYPES, SCALE_BLOCK, WEIGHT_LAYOUTS, expand_scale, expand_weight_scale
from ._scales import weight_scale_shape as _weight_scale_shape
from .gptq import GPTQ, HessianLike, gptq_integers, hessian_tensor
from .int4 import (INT4_GRIDS, INT4_MAX, INT4_MIN, factor_group_scales, int4_grid, pack_int4, quantize_int4_asymmetric,
                   round_to_grid)
from .scheme import GROUP_SIZES, WEIGHT_BITS, WEIGHT_QUANTIZED_AS, SchemeError, WeightArgs, check_weight_granularity

__all__ = ["quantize_weight", "weight_scale_shape"]

_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def weight_scale_shape(out_features: int, in_features: int, granularity: str,
                       group_size: int = SCALE_BLOCK) -> tuple[int, ...]:
    """Shape of the fp32 weight scales: [N] per channel, [N, ceil(K/group_size)] per group of
    each output channel (1x128; 4-bit weights also 1x64 or 1x32), [ceil(N/128), ceil(K/128)] per
    128x128 block.

    Args:
        out_features: N, the weight's rows.
        in_features: K, the weight's columns.
        granularity: "channel", "group" or "block" (ValueError for anything else).
        group_size: "group": the inputs per scale, 128, 64 or 32 (ValueError otherwise; 128 for
            the other granularities).

    Example:
        >>> weight_scale_shape(4096, 14336, "block")
        (32, 112)
        >>> weight_scale_shape(4096, 14336, "group")
        (4096, 112)
        >>> weight_scale_shape(4096, 14336, "group", group_size=32)
        (4096, 448)
    """
    check_weight_granularity(granularity)
    if group_size != SCALE_BLOCK and (granularity != "group" or group_size not in GROUP_SIZES):
        raise ValueError(f"tcgemm.weights.weight_scale_shape: group_size must be one of "
                         f"{', '.join(map(str, GROUP_SIZES))} with granularity 'group' (128 otherwise), got "
                         f"{group_size!r} with granularity {granularity!r}")
    return _weight_scale_shape(out_features, in_features, granularity, group_size)



def quantize_weight(
    w: torch.Tensor,
    granularity: str = "channel",
    *,
    bits: int = 8,
    hessian: Optional[HessianLike] = None,
    gptq: Optional[GPTQ] = None,
    grid: Optional[str] = None,
    symmetric: bool = True,
    group_size: int = SCALE_BLOCK,
    scale_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, ...]:
    """Symmetric quantization of an ``nn.Linear`` weight [N, K] to int8 or packed 4-bit, computed
    in fp32 on ``w``'s device.

    8 bits (scales of :func:`tcgemm.quantize`):
    ``granularity="channel"``: one scale per output row, ``scale`` fp32 [N].
    ``granularity="group"``: one scale per 1x128 group of each output row (128 input features),
    ``scale`` fp32 [N, ceil(K/128)] (the last group may be short).
    ``granularity="block"``: one scale per 128x128 block, ``scale`` fp32 [ceil(N/128), ceil(K/128)]
    (edge blocks may be short). In every case ``scale = amax / 127`` (1.0 where amax is 0) and
    ``q = clamp(round_half_even(w / scale), -127, 127)``, the rule of ``tcgemm.quantize``.

    4 bits (``bits=4``, K even; :mod:`tcgemm.int4`): ``granularity="channel"``: two-level scales,
    a channel scale ``c`` fp32 [N] and group scales ``s_g`` in [1, 16] int8 [N, ceil(K/128)] per
    1x128 group g; ``q = clamp(round_half_even(w / (c * s_g)), -8, 7)``. ``granularity="group"``:
    ``scale`` fp32 [N, ceil(K/group_size)], one per 1 x ``group_size`` group (128, 64 or 32);
    ``q = clamp(round_half_even(w / scale), -8, 7)``. The scales are those of
    :func:`tcgemm.int4.int4_grid` with ``grid``, per group of ``group_size``:

    - ``"mse"`` (the default): the scales of the least squared error of the rounded weight,
      searched per group (float groups: ``amax_g / 7`` times a clipping ratio in [0.5, 1]) and per
      channel (two-level: ``c`` = the ``"amax"`` one times a ratio in [0.7, 1], each ``s_g`` the
      best in [1, 16] for that ``c``). The candidates include the ``"amax"`` scales, so no group
      (float) or channel (two-level) has a larger squared error. all-MiniLM-L6-v2, two-level:
      mean embedding cosine 0.959 round to nearest (``"amax"``: 0.938), 0.983 with GPTQ (0.979).
    - ``"amax"``: with ``f = amax_g / 7``, two-level ``c = max_g f / 16`` (1.0 for a zero row) and
      ``s_g = clamp(round(f / c), 1, 16)``; float groups ``scale = f`` (1.0 where amax is 0).

    With ``gptq`` (a :class:`GPTQ`) and ``hessian`` the integers are chosen by GPTQ on the same
    scales instead of by rounding each weight to nearest.

    ``scale_dtype`` bf16 or fp16 (4-bit ``"group"`` weights in groups of 64 or 32, as checkpoints
    hold them): the scales above are rounded to that dtype first (to nearest, even), and ``q`` is
    chosen against the rounded scales, so that ``q * scale`` is the weight the layer computes with.

    ``symmetric=False`` (4-bit ``"group"`` only, round to nearest): a zero point per 1x128 group
    as well, :func:`tcgemm.int4.quantize_int4_asymmetric` (the group's range, 0 included, split
    into 15 steps), ``w ~ scale * (q - zero_point)``.

    Args:
        w: the float weight [N, K].
        granularity: "channel", "group" or "block" (8 bits); "channel" or "group" (4 bits).
        bits: 8 or 4.
        hessian: with ``gptq``, the second moments of the layer's input: ``sum x^T x`` [K, K]
            (any positive multiple) or the ``(sum, rows)`` pair of ``Calibration.hessians``.
        gptq: the GPTQ settings; needs ``hessian``.
        grid: 4 bits only: how the scales are chosen, ``"mse"`` (None: the default) or ``"amax"``.
        symmetric: False for asymmetric 4-bit ``"group"`` weights (no ``gptq``, no ``grid``).
        group_size: the input features per scale of 4-bit ``"group"`` weights: 128 (the default),
            64 or 32 (symmetric only); 128 for every other format.
        scale_dtype: the dtype of the scales: torch.float32 (the default), or torch.bfloat16 or
            torch.float16 with 4-bit ``"group"`` weights in groups of 64 or 32.

    Returns:
        8 bits: ``(q, scale)``, int8 [N, K] (contiguous) and the fp32 scales. 4 bits:
        ``(packed, scale, group_scale)``, uint8 [N, K/2] (:func:`tcgemm.pack_int4`), the fp32
        scales ([N, ceil(K/group_size)] for ``"group"``) and the int8 group scales
        (``"channel"``) or None (``"group"``); asymmetric:
        ``(packed, scale, None, zero_point)``, the zero points int8 [N, ceil(K/128)]. On ``w``'s
        device.

    Raises:
        ValueError: an unknown ``granularity``, ``bits`` not 8 or 4, ``"block"`` with 4 bits, a
            ``w`` that is not 2-D, an odd K with 4 bits, ``gptq`` without ``hessian`` or the
            reverse, a ``grid`` other than None with 8 bits or not ``"mse"`` / ``"amax"``, a
            ``hessian`` not [K, K], (GPTQ) a weight or Hessian holding NaN or inf, a
            ``group_size`` other than 128 except 64 or 32 with symmetric 4-bit ``"group"``
            weights, or a ``scale_dtype`` other than fp32 except bf16 or fp16 with such weights
            in groups of 64 or 32 (the message names the setting).
        TypeError: a ``w`` that is not floating point, a ``gptq`` that is not a :class:`GPTQ`,
            or a ``hessian`` that is neither a float tensor nor a ``(sum, rows)`` pair.

    Example:
        >>> q, s = quantize_weight(linear.weight, "channel")
        >>> w_approx = q.float() * s[:, None]
        >>> packed, s, g = quantize_weight(linear.weight, "channel", bits=4)
        >>> w_approx = tcgemm.unpack_int4(packed, g).float() * s[:, None]
    """
    where = "tcgemm.weights.quantize_weight"
    check_weight_granularity(granularity)
    if bits not in WEIGHT_BITS:
        raise ValueError(f"{where}: argument 'bits' must be one of {', '.join(map(str, WEIGHT_BITS))}, got {bits!r}")
    try:
        args = WeightArgs(granularity, bits=bits, symmetric=symmetric, group_size=group_size)
    except SchemeError as e:
        raise ValueError(f"{where}: {e.what}") from None
    if w.dim() != 2:
        raise ValueError(f"tcgemm.weights.quantize_weight: w must be 2-D [N, K], got shape {list(w.shape)}")
    if not w.is_floating_point():
        raise TypeError(f"tcgemm.weights.quantize_weight: w must be a float tensor, got {w.dtype}")
    n, k = w.shape
    if bits == 4 and k % 2:
        raise ValueError(f"{where}: w must have an even number of columns K for 4-bit weights (two values a byte), "
                         f"got shape {list(w.shape)}")
    if (gptq is None) != (hessian is None):
        raise ValueError(f"{where}: gptq= and hessian= go together (GPTQ needs the second moments of the layer's "
                         "input: tcgemm.calibrate(model, second_moments=True))")
    if gptq is not None and not isinstance(gptq, GPTQ):
        raise TypeError(f"{where}: argument 'gptq' must be a tcgemm.GPTQ, got {type(gptq).__name__}")
    if grid is not None and (bits != 4 or grid not in INT4_GRIDS):
        raise ValueError(f"{where}: argument 'grid' must be one of {', '.join(map(repr, INT4_GRIDS))} with bits=4 "
                         f"(None for 8 bits), got {grid!r} with bits={bits}")
    if not symmetric and (gptq is not None or grid is not None):
        raise ValueError(f"{where}: asymmetric 4-bit weights (symmetric=False) are rounded to nearest on their "
                         "groups' ranges: no gptq= or grid=")
    if scale_dtype != torch.float32 and (scale_dtype not in INT4_GROUP_SCALE_DTYPES or group_size == SCALE_BLOCK):
        raise ValueError(f"{where}: argument 'scale_dtype' must be torch.float32, or torch.bfloat16 or torch.float16 "
                         f"with 4-bit 'group' weights in groups of 64 or 32, got {scale_dtype} with bits={bits}, "
                         f"granularity={granularity!r}, group_size={group_size}")
    grid = "mse" if grid is None else grid
    w = w.detach()
    if not symmetric:
        packed, scale, zero_point = quantize_int4_asymmetric(w)
        return packed, scale, None, zero_point
    if gptq is None and bits == 8:
        return _quantize_int8(w, granularity)
    if gptq is not None:
        hessian = hessian_tensor(where, hessian, k)
    if bits == 4:  # GPTQ chooses the integers on round-to-nearest's scales, whatever their groups
        scale, group_scale, step = int4_grid(w, args.two_level, grid, group_size=group_size)
        if group_scale is not None and grid == "mse":
            scale, group_scale = _as_read_back(w, scale, group_scale)
        if scale_dtype != torch.float32:  # q against the scales the layer reads: rounded to scale_dtype first
            scale = scale.to(scale_dtype)
            step = expand_weight_scale(scale.float(), n, k, "group", group_size)
        q = round_to_grid(w, step, INT4_MIN, INT4_MAX) if gptq is None else gptq_integers(
            where, w, hessian, step, INT4_MIN, INT4_MAX, gptq)
        return pack_int4(q), scale, group_scale
    _, scale = _quantize_int8(w, granularity)
    step = expand_weight_scale(scale, n, k, granularity)
    return gptq_integers(where, w, hessian, step, -127, 127, gptq), scale


def _as_read_back(w: torch.Tensor, scale: torch.Tensor, group_scale: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-level scales of the "mse" search, whose rows' largest group scale may be below 16, as
    a checkpoint's reader factors their products (:func:`tcgemm.int4.factor_group_scales`): the
    same products, so the same steps and q, and a saved layer loads back with these very scales.
    Rows with an all-zero group keep theirs (its group scale stays 1, as the format promises).
    "amax" rows end at 16: they are that factoring already."""
    amax = nn.functional.pad(w.abs().float(), (0, group_scale.shape[1] * SCALE_BLOCK - w.shape[1]))
    rows = (amax.view(w.shape[0], -1, SCALE_BLOCK).amax(dim=2) > 0).all(dim=1).nonzero().flatten()
    factored = factor_group_scales(scale[rows, None] * group_scale[rows].float())
    if factored is None:  # a row that does not factor (not finite): all keep theirs
        return scale, group_scale
    return scale.index_copy(0, rows, factored[0]), group_scale.index_copy(0, rows, factored[1])


def _quantize_int8(w: torch.Tensor, granularity: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Round-to-nearest int8 of a float weight [N, K] (quantize_weight with 8 bits)."""
    if w.dtype not in _INPUT_DTYPES:
        w = w.to(torch.float32)  # tcgemm.quantize reads bf16, fp16 and fp32 (those exactly, as fp32)
    n, k = w.shape
    rows_as = WEIGHT_QUANTIZED_AS.get(granularity)
    if rows_as is not None:  # w's rows are tcgemm.quantize's tokens
        q, scale = quantize(w, rows_as)
        return q, scale.reshape(weight_scale_shape(n, k, granularity))
    # The rule that turns an amax into a scale is tcgemm.quantize's: quantizing the block amaxes
    # one per row gives amax / 127 (1.0 for 0, NaN for a block holding NaN or inf) as their
    # scales. Zero padding to whole blocks leaves every block's amax unchanged.
    nb, kb = weight_scale_shape(n, k, "block")
    padded = nn.functional.pad(w.abs(), (0, kb * SCALE_BLOCK - k, 0, nb * SCALE_BLOCK - n))
    amax = padded.view(nb, SCALE_BLOCK, kb, SCALE_BLOCK).amax(dim=(1, 3)).float()  # NaN stays NaN
    _, scale = quantize(amax.reshape(nb * kb, 1), "token")
    scale = scale.reshape(nb, kb)
    # Each row's 1x128 groups take the scales of its 128x128 blocks (the "group" layout of the
    # same scales); a NaN block quantizes to zeros and keeps its NaN scale, as tcgemm.quantize
    # does for a group.
    bad = scale.isnan()
    rows = expand_scale(scale.masked_fill(bad, 1.0), WEIGHT_LAYOUTS["block"], n, k)
    q, _ = quantize(w, "group", scale=rows)
    zero = expand_weight_scale(bad, n, k, "block")
    return q.masked_fill(zero, 0), scale  # no data-dependent branch: no host sync on a GPU



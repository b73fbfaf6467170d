"""Quantized layers: W8A8 and W4A8 drop-in replacements for ``nn.Linear``.

    import tcgemm.nn
    qlin = tcgemm.nn.QuantLinear.from_linear(linear)            # int8 weight, per-channel scales
    report = tcgemm.nn.quantize_model(model, skip=("lm_head",))  # swap every nn.Linear in place
    print(report)
    with tcgemm.nn.calibrate(model, second_moments=True) as calib, torch.no_grad():
        model(sample)
    tcgemm.nn.quantize_model(model, scheme=tcgemm.W4A8, calibration=calib, gptq=tcgemm.GPTQ())

A :class:`QuantLinear` holds its weight as int8 [N, K] with fp32 scales; its forward is one op,
``tcgemm.quant_linear``: the activations quantized on the fly (the kernels of ``tcgemm.quantize``)
and one fused int8 GEMM with the scales and bias applied in its epilogue (``tcgemm.scaled_gemm``'s). Its state is plain tensors (buffers), so ``state_dict`` works with
``torch.save`` and safetensors. The int8 weight is frozen; gradients flow to the input (through the
dequantized weight, the quantization of the input taken as the identity) and to a bias that
requires them, so adapters such as LoRA train on a frozen int8 base. With a 4-bit scheme
(:data:`tcgemm.W4A8`, :data:`tcgemm.W4A8_GROUP`) the weight is packed two values a byte
(:mod:`tcgemm.int4`); the activations are int8 all the same. Weights are quantized by rounding to
nearest, or by GPTQ (:class:`GPTQ`) from the second moments of the layer's calibrated inputs.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Literal, Optional, Union

import torch
from torch import nn

import tcgemm  # the ops are looked up at call time, so this works while tcgemm/__init__ is loading

from ._library import typed_error
from ._scales import SCALE_BLOCK, WEIGHT_LAYOUTS, expand_scale, expand_weight_scale
from ._scales import weight_scale_shape as _weight_scale_shape
from .int4 import (
    INT4_GRIDS, INT4_MAX, INT4_MIN, check_group_scale, check_packed, int4_grid, pack_int4, quantize_int4,
)
from .rotation import rotate_blocks, rotate_hessian
from .scheme import (  # noqa: F401  (WEIGHT_GRANULARITIES: tcgemm.nn's name for them)
    LAYER_ACTIVATIONS, PRESETS, WEIGHT_BITS, WEIGHT_GRANULARITIES, WEIGHT_QUANTIZED_AS, QuantScheme, SchemeError,
    WeightArgs, check_weight_granularity,
)

__all__ = [
    "Calibration", "GPTQ", "QuantLinear", "QuantizeReport", "asymmetric_scale", "calibrate", "quantize_model",
    "quantize_weight", "smooth_factors",
]

WeightGranularity = Literal["channel", "group", "block"]
ActivationGranularity = Literal["token", "block", "static"]
SkipRule = Union[str, Iterable[str], Callable[[str, nn.Module], bool]]
SchemeLike = Union[QuantScheme, str]
# A layer's input second moments: sum x^T x [K, K], or the (sum, rows) pair of Calibration.hessians.
HessianLike = Union[torch.Tensor, tuple[torch.Tensor, int]]

ACTIVATION_GRANULARITIES = LAYER_ACTIVATIONS  # the keyword shorthands of QuantScheme.from_keywords
_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_QUANT_LINEAR = None


def _quant_linear_op():
    """torch.ops.tcgemm.quant_linear.default, looked up once (the chain of torch.ops lookups
    is per-call host time; at import the extension may still be loading)."""
    global _QUANT_LINEAR
    if _QUANT_LINEAR is None:
        _QUANT_LINEAR = torch.ops.tcgemm.quant_linear.default
    return _QUANT_LINEAR


def _scheme(where: str, scheme: Optional[SchemeLike], weight: str = "channel", activation: str = "token",
            asymmetric: bool = False, smooth: Optional[float] = None) -> QuantScheme:
    """The scheme a layer is built with: ``scheme`` (a QuantScheme or a preset name), or the one
    its keyword shorthands stand for (QuantScheme.from_keywords); never both."""
    if scheme is None:
        return QuantScheme.from_keywords(weight, activation, asymmetric, smooth)
    if isinstance(scheme, str):
        if scheme not in PRESETS:
            raise ValueError(f"{where}: scheme must be a QuantScheme or one of {', '.join(map(repr, PRESETS))}, "
                             f"got {scheme!r}")
        scheme = PRESETS[scheme]
    if not isinstance(scheme, QuantScheme):
        raise TypeError(f"{where}: scheme must be a QuantScheme or a preset name, got {type(scheme).__name__}")
    if (weight, activation, bool(asymmetric), smooth) != ("channel", "token", False, None):
        raise ValueError(f"{where}: pass scheme= or its shorthands weight=, activation=, asymmetric=, smooth=, "
                         "not both")
    return scheme.check_layer()


def weight_scale_shape(out_features: int, in_features: int, granularity: str) -> tuple[int, ...]:
    """Shape of the fp32 weight scales: [N] per channel, [N, ceil(K/128)] per 1x128 group of each
    output channel, [ceil(N/128), ceil(K/128)] per 128x128 block.

    Example:
        >>> weight_scale_shape(4096, 14336, "block")
        (32, 112)
        >>> weight_scale_shape(4096, 14336, "group")
        (4096, 112)
    """
    return _weight_scale_shape(out_features, in_features, check_weight_granularity(granularity))


@dataclass(frozen=True)
class GPTQ:
    """GPTQ (Frantar et al., 2022): quantizes a weight one input column at a time and spreads each
    column's rounding error over the columns not yet quantized, weighted by the inverse of the
    second moments ``H = sum x^T x`` of the layer's inputs, so that the layer's outputs on
    inputs like the calibration ones change least (``||X W^T - X W_q^T||``), not the weight.

    The scales are those of round-to-nearest (``quantize_weight``'s ``grid``, by default the
    scales of the least squared error of the rounded weight), from the float weight's groups
    before GPTQ runs: only the integers differ, so a GPTQ layer has the format (and runs the kernels) of any other.

    Args:
        damp: added to the diagonal of ``H`` as ``damp * mean(diag(H))`` before it is inverted
            (the calibration rarely spans every input direction); larger is more stable and
            closer to round-to-nearest.
        act_order: quantize the columns in decreasing order of ``diag(H)`` (the inputs with the
            largest second moments first, while there are the most columns left to absorb
            their error); the scales stay those of the weight's 1x128 groups.
        block_size: columns quantized together; the error of a block reaches the columns after
            it in one matrix product (the result does not depend on it up to rounding).

    Example:
        >>> with tcgemm.calibrate(model, second_moments=True) as calib, torch.no_grad():
        ...     model(sample)
        >>> tcgemm.quantize_model(model, scheme=tcgemm.W4A8, calibration=calib, gptq=tcgemm.GPTQ(act_order=True))
    """

    damp: float = 0.01
    act_order: bool = False
    block_size: int = 128

    def __post_init__(self) -> None:
        if isinstance(self.damp, bool) or not isinstance(self.damp, (int, float)) or not (
                math.isfinite(self.damp) and self.damp >= 0):
            raise ValueError(f"tcgemm.GPTQ: argument 'damp' must be a finite number >= 0, got {self.damp!r}")
        if not isinstance(self.act_order, bool):
            raise TypeError(f"tcgemm.GPTQ: argument 'act_order' must be a bool, got {type(self.act_order).__name__}")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"tcgemm.GPTQ: argument 'block_size' must be an int >= 1, got {self.block_size!r}")


def _hessian_tensor(where: str, hessian: HessianLike, k: int) -> torch.Tensor:
    """``hessian`` (a [K, K] tensor, or the (sum, rows) pair of Calibration.hessians: their mean)
    as a [K, K] tensor, checked."""
    if isinstance(hessian, (tuple, list)):
        if len(hessian) != 2 or not isinstance(hessian[0], torch.Tensor):
            raise TypeError(f"{where}: argument 'hessian' must be a tensor [K, K] or a (sum x^T x, rows) pair "
                            "of Calibration.hessians")
        total, rows = hessian
        hessian = total / max(int(rows), 1)
    if not isinstance(hessian, torch.Tensor):
        raise TypeError(f"{where}: argument 'hessian' must be a tensor [K, K] or a (sum x^T x, rows) pair, "
                        f"got {type(hessian).__name__}")
    if tuple(hessian.shape) != (k, k):
        raise ValueError(f"{where}: argument 'hessian' must have shape [K, K] = [{k}, {k}] (the second moments of "
                         f"the layer's input), got {list(hessian.shape)}")
    if not hessian.is_floating_point():
        raise TypeError(f"{where}: argument 'hessian' must be a float tensor, got {hessian.dtype}")
    return hessian


def _gptq(where: str, w: torch.Tensor, hessian: torch.Tensor, step: torch.Tensor, lo: int, hi: int,
          config: GPTQ) -> torch.Tensor:
    """The integers GPTQ gives the weight ``w`` [N, K] on the grid ``step`` [N, K] (one step per
    element, fixed beforehand) clamped to [lo, hi], with second moments ``hessian`` [K, K]; int8
    [N, K]. fp32 on ``w``'s device, the Hessian's inverse and its Cholesky factor in float64."""
    n, k = w.shape
    device = w.device
    weight = w.detach().to(torch.float32).clone()
    if not bool(weight.isfinite().all()):
        raise ValueError(f"{where}: GPTQ needs a finite weight; w holds NaN or inf")
    h = hessian.detach().to(device=device, dtype=torch.float64).clone()
    if not bool(h.isfinite().all()):
        raise ValueError(f"{where}: argument 'hessian' holds NaN or inf (did the calibration inputs?)")
    step = torch.where(step > 0, step.float(), 1.0)  # a step that underflowed to 0: any grid holds those zeros
    # Inputs that never reached the layer: nothing to preserve; their weights quantize to 0.
    dead = h.diagonal() == 0
    idx = dead.nonzero().squeeze(1)
    h[idx, idx] = 1.0
    weight[:, dead] = 0.0
    perm = None
    if config.act_order:
        perm = torch.argsort(h.diagonal(), descending=True, stable=True)
        weight, step, h = weight[:, perm], step[:, perm], h[perm][:, perm]
    h.diagonal().add_(config.damp * h.diagonal().mean())
    chol, info = torch.linalg.cholesky_ex(h)
    if int(info) == 0:
        # U upper triangular with H^-1 = U^T U: row i of U, over U[i, i], carries column i's error
        # to the columns after it (the inverse Hessian of the columns left, by elimination).
        u, info = torch.linalg.cholesky_ex(torch.cholesky_inverse(chol), upper=True)
    if int(info) != 0:
        raise ValueError(f"{where}: the damped Hessian is not positive definite (GPTQ damp={config.damp}); "
                         "pass a larger GPTQ(damp=...) or more calibration data")
    u = u.to(torch.float32)
    # Column k of the weight is row k here: each step reads and updates contiguous rows.
    wt, st = weight.t().contiguous(), step.t().contiguous()
    qt = torch.empty_like(wt)
    for b0 in range(0, k, config.block_size):
        b1 = min(b0 + config.block_size, k)
        ub = u[b0:b1, b0:b1]
        err = torch.empty(b1 - b0, n, dtype=torch.float32, device=device)
        for i in range(b1 - b0):
            row, s = wt[b0 + i], st[b0 + i]
            qi = torch.round(row / s).clamp_(lo, hi)
            qt[b0 + i] = qi
            e = (row - qi * s) / ub[i, i]
            err[i] = e
            wt[b0 + i + 1:b1].addr_(ub[i, i + 1:], e, alpha=-1.0)
        wt[b1:].addmm_(u[b0:b1, b1:].t(), err, alpha=-1.0)  # the block's error, to the columns after it
    q = qt.t()
    if perm is not None:
        q = q[:, torch.argsort(perm)]
    return q.to(torch.int8).contiguous()


def quantize_weight(
    w: torch.Tensor,
    granularity: str = "channel",
    *,
    bits: int = 8,
    hessian: Optional[HessianLike] = None,
    gptq: Optional[GPTQ] = None,
    grid: Optional[str] = None,
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
    ``scale`` fp32 [N, ceil(K/128)]; ``q = clamp(round_half_even(w / scale), -8, 7)``. The scales
    are those of :func:`tcgemm.int4.int4_grid` with ``grid``:

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

    Args:
        w: the float weight [N, K].
        granularity: "channel", "group" or "block" (8 bits); "channel" or "group" (4 bits).
        bits: 8 or 4.
        hessian: with ``gptq``, the second moments of the layer's input: ``sum x^T x`` [K, K]
            (any positive multiple) or the ``(sum, rows)`` pair of ``Calibration.hessians``.
        gptq: the GPTQ settings; needs ``hessian``.
        grid: 4 bits only: how the scales are chosen, ``"mse"`` (None: the default) or ``"amax"``.

    Returns:
        8 bits: ``(q, scale)``, int8 [N, K] (contiguous) and the fp32 scales. 4 bits:
        ``(packed, scale, group_scale)``, uint8 [N, K/2] (:func:`tcgemm.pack_int4`), the fp32
        scales and the int8 group scales (``"channel"``) or None (``"group"``). On ``w``'s device.

    Example:
        >>> q, s = quantize_weight(linear.weight, "channel")
        >>> w_approx = q.float() * s[:, None]
        >>> packed, s, g = quantize_weight(linear.weight, "channel", bits=4)
        >>> w_approx = tcgemm.unpack_int4(packed, g).float() * s[:, None]
    """
    where = "tcgemm.nn.quantize_weight"
    check_weight_granularity(granularity)
    if bits not in WEIGHT_BITS:
        raise ValueError(f"{where}: argument 'bits' must be one of {', '.join(map(str, WEIGHT_BITS))}, got {bits!r}")
    try:
        args = WeightArgs(granularity, bits=bits)
    except SchemeError as e:
        raise ValueError(f"{where}: {e.what}") from None
    if w.dim() != 2:
        raise ValueError(f"tcgemm.nn.quantize_weight: w must be 2-D [N, K], got shape {list(w.shape)}")
    if not w.is_floating_point():
        raise TypeError(f"tcgemm.nn.quantize_weight: w must be a float tensor, got {w.dtype}")
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
    grid = "mse" if grid is None else grid
    w = w.detach()
    if gptq is None:
        if bits == 4:
            return quantize_int4(w, args.two_level, grid)
        return _quantize_int8(w, granularity)
    hessian = _hessian_tensor(where, hessian, k)
    if bits == 4:
        scale, group_scale, step = int4_grid(w, args.two_level, grid)
        return pack_int4(_gptq(where, w, hessian, step, INT4_MIN, INT4_MAX, gptq)), scale, group_scale
    _, scale = _quantize_int8(w, granularity)
    step = expand_weight_scale(scale, n, k, granularity)
    return _gptq(where, w, hessian, step, -127, 127, gptq), scale


def _quantize_int8(w: torch.Tensor, granularity: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Round-to-nearest int8 of a float weight [N, K] (quantize_weight with 8 bits)."""
    if w.dtype not in _INPUT_DTYPES:
        w = w.to(torch.float32)  # tcgemm.quantize reads bf16, fp16 and fp32 (those exactly, as fp32)
    n, k = w.shape
    rows_as = WEIGHT_QUANTIZED_AS.get(granularity)
    if rows_as is not None:  # w's rows are tcgemm.quantize's tokens
        q, scale = tcgemm.quantize(w, rows_as)
        return q, scale.reshape(weight_scale_shape(n, k, granularity))
    # The rule that turns an amax into a scale is tcgemm.quantize's: quantizing the block amaxes
    # one per row gives amax / 127 (1.0 for 0, NaN for a block holding NaN or inf) as their
    # scales. Zero padding to whole blocks leaves every block's amax unchanged.
    nb, kb = weight_scale_shape(n, k, "block")
    padded = nn.functional.pad(w.abs(), (0, kb * SCALE_BLOCK - k, 0, nb * SCALE_BLOCK - n))
    amax = padded.view(nb, SCALE_BLOCK, kb, SCALE_BLOCK).amax(dim=(1, 3)).float()  # NaN stays NaN
    _, scale = tcgemm.quantize(amax.reshape(nb * kb, 1), "token")
    scale = scale.reshape(nb, kb)
    # Each row's 1x128 groups take the scales of its 128x128 blocks (the "group" layout of the
    # same scales); a NaN block quantizes to zeros and keeps its NaN scale, as tcgemm.quantize
    # does for a group.
    bad = scale.isnan()
    rows = expand_scale(scale.masked_fill(bad, 1.0), WEIGHT_LAYOUTS["block"], n, k)
    q, _ = tcgemm.quantize(w, "group", scale=rows)
    zero = expand_weight_scale(bad, n, k, "block")
    return q.masked_fill(zero, 0), scale  # no data-dependent branch: no host sync on a GPU


def smooth_factors(input_amax: torch.Tensor, w: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """SmoothQuant's per-input-channel factors ``s_j = max|X_j|**alpha / max|W_j|**(1 - alpha)``.

    Dividing the input's channel j by ``s_j`` and multiplying the weight's column j by it leaves
    ``x @ W.T`` unchanged and moves quantization difficulty from activations with outlier
    channels into the weight (alpha = 0.5 splits it evenly). Channels where either amax is 0 (or
    not finite) keep ``s_j = 1``.

    Args:
        input_amax: fp32 [K], the calibrated max |x| per input channel (:func:`calibrate`).
        w: the float weight [N, K].
        alpha: migration strength in [0, 1].

    Returns:
        fp32 [K] on ``w``'s device.
    """
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError(f"smooth_factors: alpha must be in [0, 1], got {alpha}")
    a = input_amax.detach().to(device=w.device, dtype=torch.float32)
    wmax = w.detach().abs().amax(dim=0).float()
    s = a.clamp_min(1e-30).pow(alpha) / wmax.clamp_min(1e-30).pow(1.0 - alpha)
    good = (a > 0) & (wmax > 0) & a.isfinite() & wmax.isfinite() & s.isfinite() & (s > 0)
    return torch.where(good, s, torch.ones_like(s))


def asymmetric_scale(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The static asymmetric int8 scale and zero point of inputs in [lo, hi] (0-D tensors).

    The range is widened to hold 0 (so 0 stays exact), ``scale = (hi - lo) / 255`` (1.0 for an
    empty range) and ``zero_point = round_half_even(-lo / scale) - 128`` in [-128, 127]: the
    rule of ``tcgemm.quantize(..., symmetric=False)`` for one row.

    Returns:
        fp32 [] scale and int32 [] zero point, on ``lo``'s device; NaN and 0 for a range that is
        not finite.

    Example:
        >>> s, z = asymmetric_scale(torch.tensor(-1.0), torch.tensor(3.0))   # s = 4 / 255, z = -64
    """
    lo = lo.detach().float().clamp_max(0)
    hi = hi.detach().float().clamp_min(0)
    finite = lo.isfinite() & hi.isfinite()
    scale = ((hi.double() - lo.double()) / 255).float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.where(finite, torch.round(-lo / scale).clamp(0, 255) - 128, 0.0).to(torch.int32)
    # A range holding NaN or inf gives the scale NaN and the zero point 0, the rule of
    # tcgemm.quantize for such a group (the CPU refuses the NaN static scale; a GPU makes the
    # layer's outputs NaN).
    return torch.where(finite, scale, torch.full_like(scale, float("nan"))), zero


class Calibration(dict):
    """What :func:`calibrate` records: qualified name -> the max |x| per input channel (fp32
    [in_features]), and in ``ranges`` name -> (min x, max x) per input channel, which static
    asymmetric activations need. With ``second_moments=True``, ``hessians`` name -> (sum of
    x^T x over the rows of the input, fp32 [in_features, in_features]; the number of rows), which
    GPTQ needs."""

    def __init__(self) -> None:
        super().__init__()
        self.ranges: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.hessians: dict[str, tuple[torch.Tensor, int]] = {}


@contextlib.contextmanager
def calibrate(model: nn.Module, *, second_moments: bool = False) -> Iterator[Calibration]:
    """Records the max |x| (and the min and max of x) per input channel of every ``nn.Linear`` in
    ``model`` while the block runs: the calibration that static activation scales and SmoothQuant
    need; with ``second_moments=True`` also the sum of ``x^T x`` over the input rows and their
    number, which GPTQ needs (a [K, K] matrix product per call and fp32 [K, K] per layer).

    Yields a :class:`Calibration`, a dict qualified name -> fp32 [in_features] running amax with
    the running (min, max) in its ``ranges`` and the second moments in its ``hessians``, filled as
    the model runs (NaN or inf in an input propagate into them). Hooks are removed on exit.

    Example:
        >>> with tcgemm.nn.calibrate(model) as amax, torch.no_grad():
        ...     for batch in sample_batches:
        ...         model(batch)
        >>> quantize_model(model, activation="static", calibration=amax, smooth=0.5)
        >>> with tcgemm.nn.calibrate(model, second_moments=True) as calib, torch.no_grad():
        ...     model(sample)
        >>> quantize_model(model, scheme=tcgemm.W4A8, calibration=calib, gptq=tcgemm.GPTQ())
    """
    if not isinstance(second_moments, bool):
        raise TypeError(f"tcgemm.nn.calibrate: argument 'second_moments' must be a bool, "
                        f"got {type(second_moments).__name__}")
    amax = Calibration()
    handles = []
    for name, module in model.named_modules():  # a shared Linear is visited once, under its first name
        if isinstance(module, nn.Linear):

            def record(mod, args, name=name):
                x = args[0].detach()
                if x.numel() == 0:
                    return
                x2d = x.reshape(-1, x.shape[-1])
                a = x2d.abs().amax(dim=0).float()
                lo, hi = x2d.amin(dim=0).float(), x2d.amax(dim=0).float()
                if name in amax:
                    a = torch.maximum(amax[name], a)
                    lo = torch.minimum(amax.ranges[name][0], lo)
                    hi = torch.maximum(amax.ranges[name][1], hi)
                amax[name] = a
                amax.ranges[name] = (lo, hi)
                if second_moments:
                    xf = x2d.float()
                    xtx = xf.t() @ xf
                    if name in amax.hessians:
                        total, rows = amax.hessians[name]
                        amax.hessians[name] = (total.add_(xtx), rows + xf.shape[0])
                    else:
                        amax.hessians[name] = (xtx, xf.shape[0])

            handles.append(module.register_forward_pre_hook(record))
    try:
        yield amax
    finally:
        for handle in handles:
            handle.remove()


class QuantLinear(nn.Module):
    """W8A8 (or W4A8) linear layer: ``y = x @ W.T + b`` with int8 (or packed 4-bit) W and int8
    activations, fp32 scales.

    How it quantizes is one :class:`tcgemm.QuantScheme` (``scheme=``: a scheme or a preset name
    such as ``"w8a8-block"``), kept as ``layer.scheme``; the keywords ``weight``, ``activation``
    and ``asymmetric`` are shorthands for one (:meth:`tcgemm.QuantScheme.from_keywords`), and
    ``weight_granularity``, ``activation_granularity`` and ``asymmetric`` read it back in their words.

    Buffers (plain tensors, all of them in ``state_dict``):
        ``weight``: int8 [out_features, in_features]; with 4-bit weights uint8
        [out_features, in_features / 2], two values a byte (:func:`tcgemm.pack_int4`).
        ``weight_scale``: fp32 [out_features] (``weight="channel"``),
        [out_features, ceil(in/128)] (``weight="group"``, 1x128 groups of each output channel) or
        [ceil(out/128), ceil(in/128)] (``weight="block"``, 128x128 blocks).
        ``weight_group_scale``: int8 [out_features, ceil(in/128)] with values in [1, 16], the
        integer group scales of 4-bit weights with two-level scales (:data:`tcgemm.W4A8`:
        ``weight = q * weight_group_scale * weight_scale`` per 1x128 group), else None.
        ``bias``: fp32 [out_features], or None.
        ``input_scale``: fp32 [] (``activation="static"``), else None.
        ``input_zero_point``: int32 [] (``activation="static"`` and ``asymmetric=True``), else None.
        ``smooth``: fp32 [in_features] SmoothQuant multipliers (``smooth=True``), else None.
        ``weight_colsum``: int32 [out_features], the weight's row sums (``asymmetric=True``),
        else None; derived from ``weight`` and kept out of ``state_dict`` (recomputed on load).

    Activations are quantized in ``forward``: dynamically, one scale per token (row) with
    ``activation="token"`` or per token and 128-wide K block with ``activation="block"``; or
    with the calibrated per-tensor ``input_scale`` (``activation="static"``, no amax pass).
    With ``asymmetric=True`` (per-channel weights, ``activation="token"`` or ``"static"``) the
    activations are quantized with a zero point, ``x ~ scale * (q - zero_point)``, which uses
    all 256 int8 codes for inputs that are not centred on 0 (e.g. after a GELU); the GEMM's
    epilogue subtracts ``zero_point * weight_colsum``.
    With SmoothQuant the input is multiplied by ``smooth`` (per input channel) in the same pass,
    and the weight holds the reciprocal factors folded in: the layer computes
    ``(x * smooth) @ (weight * weight_scale).T + bias``.
    The output has the input's dtype (bf16, fp16 or fp32) and shape [..., out_features].

    With 4-bit weights (``scheme=tcgemm.W4A8`` or ``tcgemm.W4A8_GROUP``; ``in_features`` even)
    the activations are int8 as above; two-level weights run the int8 GEMM of per-channel W8A8
    on ``q * weight_group_scale``, float group scales that of 1x128 weight groups.

    The plain constructor makes zero weights of the right shapes, for ``load_state_dict``
    (which checks the packed weight's dtype and the group scales' values);
    use :meth:`from_linear` to quantize a trained layer.

    Example:
        >>> qlin = QuantLinear.from_linear(nn.Linear(4096, 14336).cuda(), weight="block", activation="block")
        >>> y = qlin(torch.randn(8, 4096, device="cuda", dtype=torch.bfloat16))   # bf16 [8, 14336]
        >>> fresh = QuantLinear(4096, 14336, weight="block", activation="block", device="cuda")
        >>> fresh.load_state_dict(qlin.state_dict())
        >>> same = QuantLinear(4096, 14336, scheme=tcgemm.W8A8_BLOCK, device="cuda")
        >>> w4 = QuantLinear.from_linear(nn.Linear(4096, 14336).cuda(), scheme=tcgemm.W4A8)   # 4-bit weights
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        weight: WeightGranularity = "channel",
        activation: ActivationGranularity = "token",
        device: Optional[Union[torch.device, str, int]] = None,
        smooth: bool = False,
        asymmetric: bool = False,
        *,
        scheme: Optional[SchemeLike] = None,
    ) -> None:
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.scheme: QuantScheme = _scheme("QuantLinear", scheme, weight, activation, asymmetric)
        self._op_activation = self.scheme.activation  # forward's argument, read once
        self._rotate = self.scheme.rotate
        if self._rotate and self.in_features % SCALE_BLOCK:
            raise ValueError(f"QuantLinear: rotate=True needs in_features a multiple of {SCALE_BLOCK} (one Hadamard "
                             f"block each), got {self.in_features}")
        smooth = bool(smooth) or self.scheme.smooth is not None
        static = self.scheme.static
        weights = self.scheme.weights
        n, k = self.out_features, self.in_features
        if weights.bits == 4 and k % 2:
            raise ValueError(f"QuantLinear: in_features must be even for 4-bit weights (two values a byte), got {k}")
        self.register_buffer("weight", torch.zeros(weights.storage_shape(n, k), device=device,
                                                   dtype=torch.uint8 if weights.bits == 4 else torch.int8))
        self.register_buffer("weight_scale", torch.ones(weights.scale_shape(n, k), dtype=torch.float32, device=device))
        group_shape = weights.group_scale_shape(n, k)
        self.register_buffer("weight_group_scale", None if group_shape is None else
                             torch.ones(group_shape, dtype=torch.int8, device=device))
        if bias:
            self.register_buffer("bias", torch.zeros(self.out_features, dtype=torch.float32, device=device))
        else:
            self.register_buffer("bias", None)
        self.register_buffer("input_scale", torch.ones((), dtype=torch.float32, device=device) if static else None)
        self.register_buffer(
            "input_zero_point",
            torch.zeros((), dtype=torch.int32, device=device) if static and self.asymmetric else None,
        )
        self.register_buffer(
            "smooth", torch.ones(self.in_features, dtype=torch.float32, device=device) if smooth else None
        )
        self.register_buffer(
            "weight_colsum",
            torch.zeros(self.out_features, dtype=torch.int32, device=device) if self.asymmetric else None,
            persistent=False,
        )
        # Tensor parallelism (tcgemm.parallel): where a sharded layer sits, and whether this rank
        # adds the bias (a row-wise shard adds it on one rank only; kept as a flag, not derived from
        # tensor_parallel per call, for forward's host time).
        self.tensor_parallel = None
        self._add_bias = True
        if weights.bits == 4:
            self.register_load_state_dict_pre_hook(_check_int4_state)
        if self.asymmetric:
            self.register_load_state_dict_post_hook(_refresh_colsum_after_load)

    @property
    def weight_granularity(self) -> str:
        """The scheme's weight granularity: "channel", "group" or "block"."""
        return self.scheme.weight

    @property
    def activation_granularity(self) -> str:
        """The scheme's activations in the ``activation=`` shorthand: "token", "block" or "static"."""
        return self._op_activation

    @property
    def asymmetric(self) -> bool:
        """Whether the activations are quantized with a zero point."""
        return self.scheme.asymmetric

    @property
    def bits(self) -> int:
        """The weight's bits: 8, or 4 (packed two values a byte)."""
        return self.scheme.bits

    def int_weight(self) -> torch.Tensor:
        """The int8 [out, in] weight the GEMM multiplies: ``weight`` itself, or for 4-bit weights
        its unpacked values (times ``weight_group_scale`` where the layer has it)."""
        if self.weight.dtype == torch.uint8:
            return tcgemm.unpack_int4(self.weight.detach(), self.weight_group_scale)
        return self.weight.detach()

    def refresh_weight_colsum(self) -> None:
        """Recomputes ``weight_colsum`` from ``weight`` (asymmetric layers; a no-op otherwise), on
        ``weight``'s device. Loading a state dict does it (``assign=True`` included); call it after
        writing ``weight`` yourself. ``torch.func.functional_call`` with a replacement ``weight``
        must pass the matching ``weight_colsum`` (``weight.sum(1, dtype=torch.int32)``; for 4-bit
        weights the row sums of :meth:`int_weight`) too."""
        if self.weight_colsum is not None:
            self._buffers["weight_colsum"] = self.int_weight().sum(dim=1, dtype=torch.int32)

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        weight: WeightGranularity = "channel",
        activation: ActivationGranularity = "token",
        input_amax: Optional[torch.Tensor] = None,
        smooth: Optional[float] = None,
        asymmetric: bool = False,
        input_range: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
        *,
        scheme: Optional[SchemeLike] = None,
        gptq: Optional[GPTQ] = None,
        hessian: Optional[HessianLike] = None,
        name: str = "",
    ) -> "QuantLinear":
        """Quantizes a trained ``nn.Linear`` (any float dtype, any device; it is left untouched).

        Args:
            scheme: a :class:`tcgemm.QuantScheme` or preset name (its ``smooth`` is the alpha
                below); or its shorthands ``weight``, ``activation``, ``asymmetric``, ``smooth``.
            weight, activation: granularities (see the class).
            input_amax: the calibrated max |x| per input channel, fp32 [in_features] (from
                :func:`calibrate`); needed by ``activation="static"`` and ``smooth``.
            smooth: SmoothQuant's migration strength alpha in [0, 1]: the input channels are
                scaled by ``1 / s`` and the weight's columns by ``s`` with
                ``s = input_amax**alpha / max|W[:, j]|**(1 - alpha)`` (:func:`smooth_factors`).
            asymmetric: quantize the activations with a zero point (see the class).
            input_range: the calibrated (min x, max x) per input channel, two fp32
                [in_features] (``Calibration.ranges``); needed by ``activation="static"`` with
                ``asymmetric``.
            gptq: quantize the weight with GPTQ (a :class:`GPTQ`) instead of rounding to nearest;
                needs ``hessian``.
            hessian: the second moments of the layer's input, ``sum x^T x`` [in_features,
                in_features] (any positive multiple), or the ``(sum, rows)`` pair of
                ``Calibration.hessians`` (:func:`calibrate` with ``second_moments=True``).
            name: the layer's name, for error messages (``quantize_model`` passes it).

        A ``linear`` sharded by torch's tensor-parallel styles (a DTensor weight, ``Shard(0)`` or
        ``Shard(1)``) is quantized whole and returned sharded the same way with tcgemm's style
        (:mod:`tcgemm.parallel`): the same weights as quantizing first and sharding after.

        With ``activation="static"`` the input scale is the calibrated amax of the (smoothed)
        input over 127; asymmetric, the scale and zero point of the calibrated range of the
        (smoothed) input (:func:`asymmetric_scale`). With SmoothQuant and GPTQ, GPTQ sees the
        smoothed weight and the second moments of the smoothed input
        (``diag(1/s) H diag(1/s)``).

        Example:
            >>> qlin = QuantLinear.from_linear(model.fc1, weight="channel", activation="token")
            >>> with calibrate(model) as amax:
            ...     model(sample)
            >>> qlin = QuantLinear.from_linear(model.fc1, activation="static", input_amax=amax["fc1"], smooth=0.5)
            >>> with calibrate(model, second_moments=True) as calib:
            ...     model(sample)
            >>> qlin = QuantLinear.from_linear(model.fc1, scheme=tcgemm.W4A8, gptq=tcgemm.GPTQ(),
            ...                                hessian=calib.hessians["fc1"])
        """
        where = "QuantLinear.from_linear"
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"QuantLinear.from_linear: expected an nn.Linear, got {type(linear).__name__}")
        scheme = _scheme("QuantLinear.from_linear", scheme, weight, activation, asymmetric, smooth)
        if (gptq is None) != (hessian is None):
            raise ValueError(f"{where}: gptq= and hessian= go together (GPTQ needs the second moments of the layer's "
                             "input: Calibration.hessians of tcgemm.calibrate(model, second_moments=True))")
        if gptq is not None and not isinstance(gptq, GPTQ):
            raise TypeError(f"{where}: argument 'gptq' must be a tcgemm.GPTQ, got {type(gptq).__name__}")
        if hessian is not None:
            hessian = _hessian_tensor(where, hessian, linear.in_features)
        sharded = None
        if type(linear.weight) not in (nn.Parameter, torch.Tensor):  # a DTensor (tensor parallel)?
            from . import parallel

            linear, sharded = parallel.full_linear(linear, name)
        smooth = scheme.smooth
        static_asymmetric = scheme.static and scheme.asymmetric
        if ((scheme.static and not scheme.asymmetric) or smooth is not None) and input_amax is None:
            raise ValueError("QuantLinear.from_linear: activation='static' and smooth need input_amax (see calibrate)")
        if static_asymmetric and input_range is None:
            raise ValueError(
                "QuantLinear.from_linear: activation='static' with asymmetric=True needs input_range (see calibrate)"
            )
        if input_range is not None and (
            len(input_range) != 2 or any(tuple(t.shape) != (linear.in_features,) for t in input_range)
        ):
            raise ValueError(
                f"QuantLinear.from_linear: input_range must be two tensors of shape [in_features] = "
                f"[{linear.in_features}] (min and max)"
            )
        if input_amax is not None and tuple(input_amax.shape) != (linear.in_features,):
            raise ValueError(
                f"QuantLinear.from_linear: input_amax must have shape [in_features] = [{linear.in_features}], "
                f"got {list(input_amax.shape)}"
            )
        device = linear.weight.device
        module = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device=device, scheme=scheme)
        w = linear.weight.detach()
        amax = None if input_amax is None else input_amax.detach().to(device=device, dtype=torch.float32)
        if hessian is not None:
            hessian = hessian.detach().to(device=device, dtype=torch.float32)
        if scheme.rotate:  # the weight's rows and the input both times R (tcgemm.rotation)
            w = rotate_blocks(w.float())
            if hessian is not None:
                hessian = rotate_hessian(hessian)
        if smooth is not None:
            factors = smooth_factors(amax, w, smooth)
            module.smooth.copy_(1.0 / factors)
            w = w.float() * factors  # the columns of W carry s, the input 1 / s
            amax = amax * module.smooth
            if hessian is not None:  # the second moments of the smoothed input x / s
                hessian = hessian * module.smooth[:, None] * module.smooth[None, :]
        if static_asymmetric:
            lo, hi = (t.detach().to(device=device, dtype=torch.float32) for t in input_range)
            if module.smooth is not None:  # positive multipliers: the smoothed channel's range
                lo, hi = lo * module.smooth, hi * module.smooth
            scale, zero = asymmetric_scale(lo.min(), hi.max())
            module.input_scale.copy_(scale)
            module.input_zero_point.copy_(zero)
        elif scheme.static:
            module.input_scale.copy_(torch.where(amax.max() > 0, amax.max() / 127.0, 1.0))
        q, scale, *group_scale = quantize_weight(w, scheme.weight, bits=scheme.bits, hessian=hessian, gptq=gptq)
        module.weight.copy_(q)
        module.weight_scale.copy_(scale)
        if module.weight_group_scale is not None:
            module.weight_group_scale.copy_(group_scale[0])
        module.refresh_weight_colsum()
        if linear.bias is not None:
            module.bias.copy_(linear.bias.detach().to(torch.float32))
        if sharded is not None:
            parallel.shard_like(module, *sharded, name=name)
        return module

    def dequantize_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the layer computes with, ``weight * weight_scale`` (4-bit weights unpacked,
        times ``weight_group_scale`` where the layer has it; times ``smooth`` per input channel,
        where the layer has it; rotated back where the layer rotates its input) as ``dtype`` [out, in].

        Example:
            >>> err = (qlin.dequantize_weight() - linear.weight).abs().max()
        """
        w = self._op_weight(torch.float32)
        return (rotate_blocks(w) if self._rotate else w).to(dtype)

    def _op_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight the input of tcgemm.quant_linear meets (rotated, where the layer rotates)."""
        w = self.int_weight().float() * expand_weight_scale(
            self.weight_scale, self.out_features, self.in_features, self.weight_granularity)
        if self.smooth is not None:
            w = w * self.smooth  # the layer multiplies its input by smooth: this is the weight x meets
        return w.to(dtype)

    def _forward_2d(self, x2d: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        try:
            return _quant_linear_op()(
                x2d, self.weight, self.weight_scale, bias, activation=self._op_activation,
                input_scale=self.input_scale, smooth=self.smooth, asymmetric=self.asymmetric,
                input_zero_point=self.input_zero_point, weight_colsum=self.weight_colsum,
                weight_group_scale=self.weight_group_scale, rotate=self._rotate,
            )
        except RuntimeError as exc:
            raise typed_error(exc) from None

    def _check_input(self, x: torch.Tensor) -> None:
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"QuantLinear: input's last dimension must be in_features={self.in_features}, "
                f"got input of shape {list(x.shape)}"
            )
        if x.dtype not in _INPUT_DTYPES:
            raise TypeError(f"QuantLinear: input dtype must be bfloat16, float16 or float32, got {x.dtype}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in_features] bf16/fp16/fp32 -> [..., out_features] of ``x.dtype``."""
        # The buffers by dict lookup (nn.Module.__getattr__ costs about 0.3 us per buffer per call);
        # by attribute when one of them has been made a Parameter (e.g. a bias to train).
        buffers = self._buffers
        try:
            weight, weight_scale, bias = buffers["weight"], buffers["weight_scale"], buffers["bias"]
            input_scale, smooth = buffers["input_scale"], buffers["smooth"]
            input_zero_point, weight_colsum = buffers["input_zero_point"], buffers["weight_colsum"]
            group_scale = buffers["weight_group_scale"]
        except KeyError:
            weight, weight_scale, bias = self.weight, self.weight_scale, self.bias
            input_scale, smooth = self.input_scale, self.smooth
            input_zero_point, weight_colsum = self.input_zero_point, self.weight_colsum
            group_scale = self.weight_group_scale
        if not self._add_bias:  # a row-wise shard other than the first (tcgemm.parallel)
            bias = None
        grad = torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad))
        if grad:  # work before the op: the input is checked first
            self._check_input(x)
            if self.tensor_parallel is not None:
                raise NotImplementedError(
                    f"QuantLinear: backward through a {self.tensor_parallel.style} tensor-parallel shard is not "
                    "supported (its input's gradient needs a collective across the ranks); run it under "
                    "torch.no_grad() or torch.inference_mode()")
            # flatten, not reshape(-1, K): -1 cannot be inferred for an empty x when K == 0.
            x2d = x.unsqueeze(0) if x.dim() == 1 else x.flatten(0, -2)
            return _QuantLinearFunction.apply(x2d, bias, self).reshape(*x.shape[:-1], self.out_features)
        # One op (tcgemm.quant_linear): quantize and GEMM behind one dispatch, [..., K] in place.
        # What every layer has by position (x, the weight and its scales, the bias, the activation
        # word); the options a scheme adds by keyword, only when the layer has them: each argument
        # the dispatcher parses is host time, a keyword about 0.5 us more than a position.
        op, activation = _quant_linear_op(), self._op_activation
        try:
            if self._rotate:  # x R quantized (tcgemm.rotation): dynamic symmetric activations only
                return op(x, weight, weight_scale, bias, activation, weight_group_scale=group_scale, rotate=True)
            if group_scale is not None:  # 4-bit weights with two-level scales: the group scales, and the rest
                if input_scale is None and smooth is None and weight_colsum is None:  # W4A8, dynamic per token
                    return op(x, weight, weight_scale, bias, activation, weight_group_scale=group_scale)
                options = {"weight_group_scale": group_scale}
                if input_scale is not None:
                    options["input_scale"] = input_scale
                if smooth is not None:
                    options["smooth"] = smooth
                if weight_colsum is not None:
                    options.update(asymmetric=True, input_zero_point=input_zero_point, weight_colsum=weight_colsum)
                return op(x, weight, weight_scale, bias, activation, **options)
            if weight_colsum is not None:  # asymmetric
                return op(x, weight, weight_scale, bias, activation, input_scale=input_scale, smooth=smooth,
                          asymmetric=True, input_zero_point=input_zero_point, weight_colsum=weight_colsum)
            if smooth is not None:
                return op(x, weight, weight_scale, bias, activation, input_scale=input_scale, smooth=smooth)
            if input_scale is not None:
                return op(x, weight, weight_scale, bias, activation, input_scale=input_scale)
            return op(x, weight, weight_scale, bias, activation)
        except (RuntimeError, TypeError) as exc:
            # The op checks x as well (no host time spent here on a good one); a bad x gets the
            # layer's message, any other failed check the ValueError or TypeError it stands for.
            self._check_input(x)
            raise typed_error(exc) if isinstance(exc, RuntimeError) else exc from None

    def __setstate__(self, state):
        # A layer pickled whole by a version without schemes holds its shorthands instead (and,
        # before asymmetric activations, lacks the zero-point buffers).
        if "scheme" not in state:
            state["scheme"] = QuantScheme.from_keywords(
                state.pop("weight_granularity"), state.pop("activation_granularity"), state.pop("asymmetric", False))
            state["_op_activation"] = state["scheme"].activation
        state.setdefault("_rotate", state["scheme"].rotate)
        state.setdefault("tensor_parallel", None)
        state.setdefault("_add_bias", True)
        state.get("_buffers", {}).pop("hadamard", None)  # rotated layers once kept the matrix as a buffer
        super().__setstate__(state)
        for name in ("input_zero_point", "weight_colsum", "weight_group_scale"):
            self._buffers.setdefault(name, None)

    def _apply(self, fn, recurse=True):
        # Module.half() / .to(torch.bfloat16) convert every floating buffer; the kernels want fp32
        # scales and rounding them would silently cost accuracy, so scales and bias keep fp32 and
        # follow only device moves. (The integer weight and group scales are never converted: they
        # are not floating point.)
        kept = {
            name: self._buffers[name]
            for name in ("weight_scale", "bias", "input_scale", "smooth")
            if self._buffers.get(name) is not None
        }
        super()._apply(fn, recurse)
        for name, old in kept.items():
            new = self._buffers[name]
            if new is not None and new.dtype != torch.float32:
                self._buffers[name] = old.to(device=new.device, dtype=torch.float32)
        return self

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"weight={self.weight_granularity!r}" + (f", bits={self.bits}" if self.bits != 8 else "")
            + f", activation={self.activation_granularity!r}"
            + (", smooth=True" if self.smooth is not None else "")
            + (", asymmetric=True" if self.asymmetric else "")
            + (", rotate=True" if self._rotate else "")
            + (f", {self.tensor_parallel.style} shard {self.tensor_parallel.rank}/{self.tensor_parallel.world_size}"
               if self.tensor_parallel is not None else "")
        )


def _refresh_colsum_after_load(module: QuantLinear, incompatible_keys) -> None:
    module.refresh_weight_colsum()  # a module-level function: modules with it still pickle


def _check_int4_state(module: QuantLinear, state_dict, prefix, *args) -> None:
    """Before a 4-bit layer loads a state dict: the packed weight is uint8 [N, K/2] and the group
    scales int8 [N, ceil(K/128)] in [1, 16] (load_state_dict would cast other dtypes silently)."""
    where = "QuantLinear.load_state_dict"
    n, k = module.out_features, module.in_features
    weight = state_dict.get(prefix + "weight")
    if weight is not None:
        check_packed(where, weight, n, k, what=f"'{prefix}weight'")
    group_scale = state_dict.get(prefix + "weight_group_scale")
    if group_scale is not None and module.weight_group_scale is not None:
        check_group_scale(where, group_scale, n, k, what=f"'{prefix}weight_group_scale'")


class _QuantLinearFunction(torch.autograd.Function):
    """QuantLinear's forward with a backward: dL/dx = dL/dy @ W_deq (straight through the
    activation quantization), dL/dbias = sum of dL/dy over rows; the int8 weight gets none."""

    @staticmethod
    def forward(ctx, x2d: torch.Tensor, bias: Optional[torch.Tensor], layer: QuantLinear) -> torch.Tensor:
        ctx.layer = layer
        return layer._forward_2d(x2d, bias)

    @staticmethod
    def backward(ctx, grad_y: torch.Tensor):
        grad_x = grad_bias = None
        if ctx.needs_input_grad[0]:  # the weight rotated back where the layer rotates x (R^T = R)
            grad_x = grad_y @ ctx.layer.dequantize_weight(grad_y.dtype)
        if ctx.needs_input_grad[1]:
            grad_bias = grad_y.float().sum(dim=0)
        return grad_x, grad_bias, None


@dataclass
class QuantizeReport:
    """What :func:`quantize_model` did: qualified names swapped, and (name, reason) pairs skipped."""

    swapped: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"quantize_model: {len(self.swapped)} nn.Linear swapped for QuantLinear, {len(self.skipped)} skipped"]
        lines += [f"  swapped  {name!r}" for name in self.swapped]
        lines += [f"  skipped  {name!r}: {reason}" for name, reason in self.skipped]
        return "\n".join(lines)


def _skip_reason(name: str, module: nn.Module, parent: nn.Module, skip, min_features: int,
                 scheme: QuantScheme) -> Optional[str]:
    if callable(skip):
        if skip(name, module):
            return "skip callable returned True"
    else:
        for pattern in skip:
            if fnmatch.fnmatchcase(name, pattern):
                return f"matches skip entry {pattern!r}"
    if isinstance(parent, nn.MultiheadAttention):
        # MultiheadAttention reads out_proj.weight directly instead of calling out_proj.
        return "inside nn.MultiheadAttention, which reads the float weight directly"
    if type(module).forward is not nn.Linear.forward:
        return f"{type(module).__name__} overrides nn.Linear.forward"
    if min(module.in_features, module.out_features) < min_features:
        return f"in/out features {module.in_features}/{module.out_features} < min_features={min_features}"
    if scheme.bits == 4 and module.in_features % 2:
        return f"in_features {module.in_features} is odd (4-bit weights pack two values a byte)"
    return None


def quantize_model(
    model: nn.Module,
    skip: SkipRule = (),
    weight: WeightGranularity = "channel",
    activation: ActivationGranularity = "token",
    min_features: int = 0,
    calibration: Optional[dict[str, torch.Tensor]] = None,
    smooth: Optional[float] = None,
    asymmetric: bool = False,
    *,
    scheme: Optional[SchemeLike] = None,
    gptq: Optional[GPTQ] = None,
) -> QuantizeReport:
    """Replaces every ``nn.Linear`` inside ``model`` (recursively, in place) by a :class:`QuantLinear`.

    Args:
        model: the module to convert; it must not itself be an ``nn.Linear`` (use
            :meth:`QuantLinear.from_linear`).
        skip: qualified names (as in ``model.named_modules()``) to leave in float: exact names or
            ``fnmatch`` patterns (``"lm_head"``, ``"*.gate"``, ``"layers.0.*"``; ``*`` also matches
            dots), or a callable ``skip(name, module) -> bool``.
        scheme: a :class:`tcgemm.QuantScheme` or preset name for every swapped layer; or its
            shorthands ``weight``, ``activation``, ``smooth`` and ``asymmetric``.
        weight, activation: granularities, see :class:`QuantLinear`.
        min_features: leave layers with ``min(in_features, out_features) < min_features`` in float
            (tiny layers gain nothing from int8); 0 swaps every size.
        calibration: per layer name, the max |x| per input channel recorded by :func:`calibrate`;
            needed by ``activation="static"`` and ``smooth``. A layer without an entry (it did
            not run during calibration) is skipped and reported.
        smooth: SmoothQuant's alpha (e.g. 0.5): smoothing factors from the calibration, folded
            into the weight and applied to the input inside the quantize pass.
        asymmetric: activations with a zero point (``weight="channel"``, ``activation="token"``
            or ``"static"``); static ones need the ranges a :class:`Calibration` from
            :func:`calibrate` holds.
        gptq: quantize the weights with GPTQ (a :class:`GPTQ`) from the second moments of each
            layer's input, which ``calibration`` holds when it comes from
            ``calibrate(model, second_moments=True)``; a layer without them (it did not run
            under calibrate) is skipped and reported.

    Layers inside ``nn.MultiheadAttention`` and ``nn.Linear`` subclasses with their own ``forward``
    are always skipped (reported), since swapping them would change what the model computes; with
    4-bit weights, so are layers with an odd ``in_features``.
    A Linear reachable under several names is converted once and stays shared.

    Returns:
        a :class:`QuantizeReport`; ``print(report)`` gives a summary.

    Example:
        >>> report = quantize_model(model, skip=("lm_head", "*.gate"), weight="block", activation="block")
        >>> print(report)
    """
    scheme = _scheme("quantize_model", scheme, weight, activation, asymmetric, smooth)
    needs_calibration = scheme.needs_calibration
    if needs_calibration and calibration is None:
        raise ValueError("quantize_model: activation='static' and smooth need calibration= (see tcgemm.nn.calibrate)")
    needs_ranges = scheme.static and scheme.asymmetric
    if needs_ranges and not isinstance(calibration, Calibration):
        raise ValueError(
            "quantize_model: activation='static' with asymmetric=True needs the input ranges of a Calibration "
            "(calibration=, from tcgemm.nn.calibrate)"
        )
    if gptq is not None:
        if not isinstance(gptq, GPTQ):
            raise TypeError(f"quantize_model: argument 'gptq' must be a tcgemm.GPTQ, got {type(gptq).__name__}")
        if not isinstance(calibration, Calibration) or not calibration.hessians:
            raise ValueError("quantize_model: gptq needs the second moments of a Calibration (calibration=, from "
                             "tcgemm.nn.calibrate(model, second_moments=True))")
    if isinstance(model, nn.Linear):
        raise TypeError("quantize_model: model is itself an nn.Linear; use QuantLinear.from_linear(model)")
    if isinstance(skip, str):  # a lone name, not an iterable of characters
        skip = (skip,)
    elif not callable(skip):
        skip = tuple(skip)
    report = QuantizeReport()
    converted: dict[int, nn.Module] = {}  # id(float Linear) -> its replacement, so shared layers stay shared

    def visit(parent: nn.Module, prefix: str) -> None:
        # _modules, not named_children(): the latter yields a module held in two slots only once.
        for child_name, child in list(parent._modules.items()):
            name = f"{prefix}{child_name}"
            if isinstance(child, nn.Linear):
                if id(child) not in converted:
                    reason = _skip_reason(name, child, parent, skip, min_features, scheme)
                    if reason is None and needs_calibration and name not in calibration:
                        reason = "no calibration data (it did not run under calibrate)"
                    if reason is None and gptq is not None and name not in calibration.hessians:
                        reason = "no second moments for GPTQ (it did not run under calibrate(..., second_moments=True))"
                    if reason is None:
                        amax = calibration.get(name) if calibration is not None else None
                        converted[id(child)] = QuantLinear.from_linear(
                            child, input_amax=amax if needs_calibration else None,
                            input_range=calibration.ranges.get(name) if needs_ranges else None, scheme=scheme,
                            gptq=gptq, hessian=calibration.hessians[name] if gptq is not None else None, name=name,
                        )
                        report.swapped.append(name)
                    else:
                        converted[id(child)] = child
                        report.skipped.append((name, reason))
                setattr(parent, child_name, converted[id(child)])
            elif child is not None:
                visit(child, f"{name}.")

    visit(model, "")
    return report

"""Calibration and SmoothQuant: what static activation scales, SmoothQuant and GPTQ learn from
sample inputs.

    with tcgemm.calibrate(model, second_moments=True) as calib, torch.no_grad():
        model(sample)
    tcgemm.quantize_model(model, activation="static", calibration=calib, smooth=0.5)

:func:`calibrate` records each ``nn.Linear``'s input statistics; :func:`smooth_factors` and
:func:`asymmetric_scale` turn them into SmoothQuant's per-channel factors and a static asymmetric
scale and zero point.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

__all__ = ["Calibration", "asymmetric_scale", "calibrate", "smooth_factors"]


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
        >>> with tcgemm.calibrate(model) as amax, torch.no_grad():
        ...     for batch in sample_batches:
        ...         model(batch)
        >>> quantize_model(model, activation="static", calibration=amax, smooth=0.5)
        >>> with tcgemm.calibrate(model, second_moments=True) as calib, torch.no_grad():
        ...     model(sample)
        >>> quantize_model(model, scheme=tcgemm.W4A8, calibration=calib, gptq=tcgemm.GPTQ())
    """
    if not isinstance(second_moments, bool):
        raise TypeError(f"tcgemm.calibrate: argument 'second_moments' must be a bool, "
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



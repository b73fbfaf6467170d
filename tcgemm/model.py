"""Whole-model quantization: :func:`quantize_model` swaps a model's ``nn.Linear`` layers for
:class:`tcgemm.QuantLinear` in place, and reports what it did.

    report = tcgemm.quantize_model(model, scheme="w8a8", skip=("lm_head",))
    print(report)
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Union

import torch
from torch import nn

from .calibration import Calibration
from .gptq import GPTQ
from .layer import QuantLinear
from .scheme import ActivationGranularity, QuantScheme, SchemeLike, WeightGranularity, resolve_scheme

__all__ = ["QuantizeReport", "SkipRule", "quantize_model", "skip_reason"]

# Which layers quantize_model leaves in float: names or fnmatch patterns, or a callable (name, module) -> bool.
SkipRule = Union[str, Iterable[str], Callable[[str, nn.Module], bool]]


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


def skip_reason(name: str, module: nn.Module, parent: nn.Module, skip, min_features: int,
                scheme: QuantScheme) -> Optional[str]:
    """Why :func:`quantize_model` leaves the ``nn.Linear`` ``module`` in float, or None to swap it.

    Args:
        name: its qualified name.
        module: the layer.
        parent: the module holding it.
        skip: names or fnmatch patterns (a tuple), or a callable ``(name, module) -> bool``.
        min_features: layers with ``min(in_features, out_features)`` below it stay float.
        scheme: the scheme it would get (4-bit weights need an even ``in_features``).
    """
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
        weight: the weight granularity, "channel", "group" or "block" (see :class:`QuantLinear`).
        activation: the activation granularity, "token", "block" or "static" (see :class:`QuantLinear`).
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
    scheme = resolve_scheme("quantize_model", scheme, weight, activation, asymmetric, smooth)
    needs_calibration = scheme.needs_calibration
    if needs_calibration and calibration is None:
        raise ValueError("quantize_model: activation='static' and smooth need calibration= (see tcgemm.calibrate)")
    needs_ranges = scheme.static and scheme.asymmetric
    if needs_ranges and not isinstance(calibration, Calibration):
        raise ValueError(
            "quantize_model: activation='static' with asymmetric=True needs the input ranges of a Calibration "
            "(calibration=, from tcgemm.calibrate)"
        )
    if gptq is not None:
        if not isinstance(gptq, GPTQ):
            raise TypeError(f"quantize_model: argument 'gptq' must be a tcgemm.GPTQ, got {type(gptq).__name__}")
        if not isinstance(calibration, Calibration) or not calibration.hessians:
            raise ValueError("quantize_model: gptq needs the second moments of a Calibration (calibration=, from "
                             "tcgemm.calibrate(model, second_moments=True))")
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
                    reason = skip_reason(name, child, parent, skip, min_features, scheme)
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


"""Quantization schemes: one typed, frozen description of how a layer's weights and input
activations are quantized.

    import tcgemm
    scheme = tcgemm.QuantScheme(weights=tcgemm.WeightArgs("block"), activations=tcgemm.ActivationArgs("group"))
    scheme = tcgemm.W8A8_BLOCK                                   # the same, as a preset
    layer = tcgemm.QuantLinear.from_linear(linear, scheme=scheme)
    tcgemm.quantize_model(model, scheme=tcgemm.W8A8_STATIC, calibration=amax)

The granularity names are compressed-tensors' strategies, so a scheme converts to and from a
compressed-tensors ``QuantizationScheme`` field by field (:meth:`QuantScheme.to_compressed_tensors`,
:meth:`QuantScheme.from_compressed_tensors`). The keywords ``weight=``, ``activation=``,
``asymmetric=`` and ``smooth=`` of :class:`tcgemm.QuantLinear` and :func:`tcgemm.quantize_model`
are shorthands for a scheme (:meth:`QuantScheme.from_keywords`).

Scale shapes (``SCALE_BLOCK`` = 128 along K; 128 along N for 128x128 blocks), for a weight
[N, K] and activations [M, K]:

==================  ==========================  =====================================
granularity         weights                     activations
==================  ==========================  =====================================
``"tensor"``        (checkpoints only)          ``[]`` static
``"token"``         --                          ``[M, 1]`` dynamic
``"channel"``       ``[N]``                     --
``"group"``         ``[N, ceil(K/128)]``        ``[M, ceil(K/128)]`` dynamic
``"block"``         ``[ceil(N/128), ceil(K/128)]``  --
==================  ==========================  =====================================

4-bit weights (``WeightArgs(granularity, bits=4)``, packed two to a byte: :mod:`tcgemm.int4`) have
``"channel"`` scales in two levels, fp32 ``[N]`` per channel times int8 ``[N, ceil(K/128)]`` per
1x128 group with values in [1, 16] (the GEMM runs on the int8 weight ``q * group_scale``), or
``"group"`` fp32 ``[N, ceil(K/128)]`` scales (symmetric ones also per group of 64 or 32,
``WeightArgs("group", bits=4, group_size=32)``: ``[N, ceil(K/32)]``, as many GPTQ checkpoints hold
them); 128x128 blocks and per-tensor scales are 8-bit only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Union

from ._scales import INT4_GROUP_SIZES, SCALE_BLOCK, quantize_scale_shape, weight_scale_shape

__all__ = [
    "ActivationArgs", "QuantScheme", "WeightArgs", "W4A8", "W4A8_GROUP", "W4A8_GROUP32", "W4A8_GROUP64",
    "W4A8_GROUP_ASYMMETRIC", "W8A8_ASYMMETRIC", "W8A8_BLOCK",
    "W8A8_CHANNEL_GROUP", "W8A8_DYNAMIC", "W8A8_GROUP", "W8A8_STATIC", "W8A8_STATIC_ASYMMETRIC", "PRESETS",
    "as_scheme", "resolve_scheme",
]

# Weight granularities a layer computes with; "tensor" describes checkpoints (one scale for the
# whole weight), which a layer holds as per-channel scales.
WEIGHT_GRANULARITIES = ("channel", "group", "block")
ACTIVATION_GRANULARITIES = ("tensor", "token", "group")
WEIGHT_BITS = (4, 8)
# The weight granularities of 4-bit weights: two-level per-channel scales, or float group scales.
INT4_GRANULARITIES = ("channel", "group")
# The granularity of tcgemm.quantize that gives a weight's scales, its rows taken as tokens (the
# granularities without one, 128x128 blocks, take their amax over 2-D blocks: nn.quantize_weight).
WEIGHT_QUANTIZED_AS = {"channel": "token", "group": "group"}
# The group sizes (input features per fp32 scale) of symmetric 4-bit "group" weights; every other
# weight format groups by SCALE_BLOCK.
GROUP_SIZES = tuple(sorted(INT4_GROUP_SIZES))


def _sizes(sizes) -> str:
    """``(32, 64, 128)`` as "32, 64 or 128"."""
    words = [str(s) for s in sizes]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


class SchemeError(ValueError):
    """A scheme tcgemm does not run; ``what`` names the setting (without the prefix), for callers
    that say where the scheme came from (a checkpoint's config group)."""

    def __init__(self, what: str, where: str = "tcgemm.QuantScheme") -> None:
        super().__init__(f"{where}: {what}")
        self.what = what


def check_weight_granularity(granularity: str) -> str:
    """``granularity`` if a layer's weights can have it, else ValueError."""
    if granularity not in WEIGHT_GRANULARITIES:
        raise SchemeError(f"weight granularity must be one of {', '.join(map(repr, WEIGHT_GRANULARITIES))}, "
                          f"got {granularity!r}", "tcgemm.nn")
    return granularity


def _block_fields(granularity: str) -> dict[str, Any]:
    """The block extents compressed-tensors spells out for a granularity (tcgemm's are fixed)."""
    if granularity == "group":
        return {"group_size": SCALE_BLOCK}
    if granularity == "block":
        return {"block_structure": [SCALE_BLOCK, SCALE_BLOCK]}
    return {}


def _field(args: Any, name: str, default: Any = None) -> Any:
    """A field of a compressed-tensors QuantizationArgs or of a dict, enums as their values."""
    value = args.get(name, default) if isinstance(args, Mapping) else getattr(args, name, default)
    return getattr(value, "value", value)


def _block_fields_match(args: Any, granularity: str) -> bool:
    """Whether compressed-tensors' group size or block structure are the fixed ones of tcgemm."""
    for name, expected in _block_fields(granularity).items():
        got = _field(args, name)
        if (list(got) if isinstance(got, (list, tuple)) else got) != expected:
            return False
    return True


def _check_group_size(group_size: Any, granularity: str, bits: int, symmetric: bool) -> None:
    """SchemeError unless ``group_size`` (not 128) is one symmetric 4-bit "group" weights have."""
    if isinstance(group_size, bool) or group_size not in GROUP_SIZES:
        raise SchemeError(f"weight group_size must be one of {_sizes(GROUP_SIZES)}, got {group_size!r}")
    if bits != 4 or granularity != "group" or not symmetric:
        raise SchemeError(f"weight group_size {group_size} needs symmetric 4-bit weights with granularity 'group' "
                          f"(fp32 group scales); {'asymmetric ' if not symmetric else ''}{bits}-bit "
                          f"'{granularity}' weights have group_size {SCALE_BLOCK}")


def _check_int4_granularity(granularity: str) -> None:
    if granularity not in INT4_GRANULARITIES:
        raise SchemeError(f"4-bit weights need granularity 'channel' (two-level scales) or 'group' (float group "
                          f"scales), got {granularity!r}")


@dataclass(frozen=True)
class WeightArgs:
    """How a weight [N, K] is quantized: ``bits``-bit signed integers, symmetric, one fp32 scale
    per output channel (``"channel"``), per 1x128 group of each output channel along K
    (``"group"``) or per 128x128 block (``"block"``).

    4-bit weights (packed two to a byte) are ``"channel"``: two-level scales, fp32 per channel
    times an int8 group scale in [1, 16] per 1x128 group (:attr:`two_level`), or ``"group"``:
    fp32 per 1x128 group, symmetric or asymmetric (``symmetric=False``: an int8 zero point in
    [-8, 7] per 1x128 group as well, ``w ~ scale * (q - zero_point)``, as AWQ and llm-compressor's
    asymmetric schemes store them). Symmetric 4-bit ``"group"`` weights may have smaller groups,
    ``group_size=64`` or ``32`` (fp32 scales [N, ceil(K/group_size)], ``w = scale[n, k //
    group_size] * q``: what many GPTQ checkpoints hold).

    Args:
        granularity: "channel", "group" or "block"; or "tensor" (one scale for the whole weight:
            checkpoints only, a layer holds it per channel, :meth:`layer_weights`).
        bits: 8, or 4 (``"channel"`` or ``"group"`` only).
        symmetric: False for zero points: 4-bit ``"group"`` weights only.
        group_size: the input features per group scale: 128 (the default), or 64 or 32 for
            symmetric 4-bit ``"group"`` weights only. Shown by ``repr`` only when not 128.

    Raises:
        ValueError: (``SchemeError``) any other granularity or bits, 4-bit ``"block"`` or
            ``"tensor"``, ``symmetric=False`` other than with 4-bit ``"group"``, or a
            ``group_size`` other than 128 except 64 or 32 with symmetric 4-bit ``"group"``.
    """

    granularity: Literal["channel", "group", "block", "tensor"] = "channel"
    bits: int = 8
    symmetric: bool = True
    group_size: int = SCALE_BLOCK

    def __post_init__(self) -> None:
        if self.granularity != "tensor":
            check_weight_granularity(self.granularity)
        if self.bits not in WEIGHT_BITS:
            raise SchemeError(f"weights are {self.bits}-bit; tcgemm quantizes weights to {WEIGHT_BITS} bits")
        if self.bits == 4:
            _check_int4_granularity(self.granularity)
        if not self.symmetric and (self.bits != 4 or self.granularity != "group"):
            raise SchemeError(f"weights are asymmetric {self.bits}-bit per {self.granularity}; weight zero points "
                              f"are read with 4-bit weights per group of {SCALE_BLOCK}")
        if self.group_size != SCALE_BLOCK:
            _check_group_size(self.group_size, self.granularity, self.bits, self.symmetric)

    def __repr__(self) -> str:
        size = f", group_size={self.group_size!r}" if self.group_size != SCALE_BLOCK else ""
        return (f"WeightArgs(granularity={self.granularity!r}, bits={self.bits!r}, symmetric={self.symmetric!r}"
                f"{size})")

    @property
    def per_block(self) -> bool:
        """Whether the float scales change along K (the GEMM promotes partial sums per K block);
        not for two-level 4-bit weights, whose group scales are folded into the integers."""
        return self.granularity in ("group", "block")

    @property
    def two_level(self) -> bool:
        """Whether these are 4-bit weights with two-level scales (fp32 per channel, int8 per group)."""
        return self.bits == 4 and self.granularity == "channel"

    def scale_shape(self, n: int, k: int) -> tuple[int, ...]:
        """Shape of the fp32 scales of a weight [N, K] (``n`` rows, ``k`` columns); ``"group"``:
        [N, ceil(K/group_size)]."""
        return weight_scale_shape(n, k, self.granularity, self.group_size)

    def zero_point_shape(self, n: int, k: int) -> Optional[tuple[int, ...]]:
        """Shape of the int8 zero points of a weight [N, K] (``n`` rows, ``k`` columns): [N,
        ceil(K/128)] for asymmetric 4-bit weights, else None."""
        return None if self.symmetric else weight_scale_shape(n, k, "group")

    def group_scale_shape(self, n: int, k: int) -> Optional[tuple[int, ...]]:
        """Shape of the int8 group scales of a weight [N, K] (``n`` rows, ``k`` columns): [N,
        ceil(K/128)] for two-level 4-bit weights, else None."""
        return weight_scale_shape(n, k, "group") if self.two_level else None

    def storage_shape(self, n: int, k: int) -> tuple[int, ...]:
        """Shape of the stored integers of a weight [N, K] (``n`` rows, ``k`` columns): [N, K] int8,
        or [N, K/2] uint8 for 4 bits."""
        return (n, k // 2) if self.bits == 4 else (n, k)

    def to_compressed_tensors(self) -> dict[str, Any]:
        """Keyword arguments of compressed-tensors' ``QuantizationArgs`` for these weights. Two-level
        4-bit weights are saved as float group scales (``strategy="group"``, ``group_size=128``:
        the format has no integer group scales), so they read back as ``WeightArgs("group", bits=4)``."""
        granularity = "group" if self.two_level else self.granularity
        fields = _block_fields(granularity)
        if granularity == "group":
            fields["group_size"] = self.group_size
        return dict(num_bits=self.bits, type="int", symmetric=self.symmetric, dynamic=False,
                    strategy=granularity, **fields)

    @classmethod
    def from_compressed_tensors(cls, args: Any) -> "WeightArgs":
        """The weights of a compressed-tensors ``QuantizationArgs`` (or its dict) ``args``;
        SchemeError (a ValueError) naming the setting tcgemm does not run: not 8- or 4-bit int,
        asymmetric other than 4-bit groups of 128, dynamic, 4-bit other than groups of 32, 64 or
        128 (symmetric) or 128 (asymmetric), or a strategy other than channel, tensor, group of 128
        or 128x128 block."""
        bits, kind = _field(args, "num_bits"), _field(args, "type")
        if bits not in WEIGHT_BITS or kind != "int":
            raise SchemeError(f"weights are {bits}-bit {kind}, not {'/'.join(map(str, WEIGHT_BITS))}-bit int")
        symmetric = bool(_field(args, "symmetric", True))
        if not symmetric and (bits != 4 or _field(args, "strategy") != "group"):
            raise SchemeError(f"weights are asymmetric {bits}-bit with strategy '{_field(args, 'strategy')}'; weight "
                              f"zero points are read with 4-bit weights per group of {SCALE_BLOCK}")
        if _field(args, "dynamic"):
            raise SchemeError("weights have dynamic scales")
        granularity = _field(args, "strategy")
        if bits == 4:
            group_size = _field(args, "group_size")
            sizes = GROUP_SIZES if symmetric else (SCALE_BLOCK,)
            if granularity != "group" or group_size not in sizes:
                raise SchemeError(f"weights are {'' if symmetric else 'asymmetric '}4-bit int with strategy "
                                  f"'{granularity}' (group_size {group_size}); 4-bit weights are read as groups of "
                                  f"{_sizes(GROUP_SIZES)} (symmetric) or {SCALE_BLOCK} (asymmetric)")
            return cls("group", bits=bits, symmetric=symmetric, group_size=group_size)
        if granularity not in WEIGHT_GRANULARITIES + ("tensor",) or not _block_fields_match(args, granularity):
            raise SchemeError(f"weight strategy '{granularity}' (group_size {_field(args, 'group_size')}, block_structure "
                       f"{_field(args, 'block_structure')}) is not channel, tensor, group of {SCALE_BLOCK} or "
                       f"{SCALE_BLOCK}x{SCALE_BLOCK} block")
        return cls(granularity, bits=bits, symmetric=symmetric)

    def layer_weights(self) -> "WeightArgs":
        """What a layer holds these weights as: one scale per tensor becomes that scale per channel."""
        return dataclasses.replace(self, granularity="channel") if self.granularity == "tensor" else self


@dataclass(frozen=True)
class ActivationArgs:
    """How a layer's input x [..., K] is quantized to int8: dynamically (scales computed per call)
    per token (``"token"``) or per 1x128 group along K (``"group"``), or with a calibrated static
    scale per tensor (``"tensor"``, ``dynamic=False``); symmetric, or with a zero point.

    Args:
        granularity: "token", "group" or "tensor" (any other raises ValueError, ``SchemeError``).
        dynamic: scales computed per call (True), or calibrated beforehand (False). A layer runs
            dynamic "token" and "group" and static "tensor" (:attr:`QuantScheme.activation`).
        symmetric: False quantizes with a zero point (``x ~ scale * (q - zero_point)``).
    """

    granularity: Literal["token", "group", "tensor"] = "token"
    dynamic: bool = True
    symmetric: bool = True

    def __post_init__(self) -> None:
        if self.granularity not in ACTIVATION_GRANULARITIES:
            raise SchemeError(f"activation granularity must be one of {', '.join(map(repr, ACTIVATION_GRANULARITIES))}, "
                       f"got {self.granularity!r}")

    @property
    def per_block(self) -> bool:
        """Whether the scales change along K (``"group"``: one per 1x128 group)."""
        return self.granularity == "group"

    def scale_shape(self, m: int, k: int) -> tuple[int, ...]:
        """Shape of the fp32 scales of activations [M, K] (``m`` rows, ``k`` columns; what
        ``tcgemm.quantize`` returns)."""
        return quantize_scale_shape(self.granularity, m, k)

    def to_compressed_tensors(self) -> dict[str, Any]:
        """Keyword arguments of compressed-tensors' ``QuantizationArgs`` for these activations."""
        return dict(num_bits=8, type="int", symmetric=self.symmetric, dynamic=self.dynamic,
                    strategy=self.granularity, **_block_fields(self.granularity))

    @classmethod
    def from_compressed_tensors(cls, args: Any) -> "ActivationArgs":
        """The activations of a compressed-tensors ``QuantizationArgs`` (or its dict) ``args``;
        SchemeError (a ValueError) naming the setting tcgemm does not run: not 8-bit int, or a
        strategy other than token, group of 128 or tensor (whether a layer runs its dynamic-ness
        is checked by :attr:`QuantScheme.activation`)."""
        bits, kind = _field(args, "num_bits"), _field(args, "type")
        if bits != 8 or kind != "int":
            raise SchemeError(f"input_activations are {bits}-bit {kind}, not 8-bit int")
        granularity, dynamic = _field(args, "strategy"), _field(args, "dynamic")
        if granularity not in ACTIVATION_GRANULARITIES or not _block_fields_match(args, granularity):
            raise SchemeError(f"input activation strategy '{granularity}' (dynamic={dynamic}, group_size="
                       f"{_field(args, 'group_size')}) is not dynamic token, dynamic group of {SCALE_BLOCK} or "
                       "static tensor")
        return cls(granularity, dynamic=dynamic is True, symmetric=bool(_field(args, "symmetric", True)))


# The activation argument of the tcgemm.quant_linear op (and QuantLinear's `activation=` keyword):
# one word per dynamic-ness and granularity the layer runs.
_LAYER_ACTIVATIONS = {
    "token": ActivationArgs("token", dynamic=True),
    "block": ActivationArgs("group", dynamic=True),
    "static": ActivationArgs("tensor", dynamic=False),
}
LAYER_ACTIVATIONS = tuple(_LAYER_ACTIVATIONS)


@dataclass(frozen=True)
class QuantScheme:
    """How a linear layer is quantized: its weights, its input activations and, optionally,
    SmoothQuant (``smooth``: the migration strength alpha; the layer then holds per-input-channel
    multipliers) or a rotation (``rotate=True``: the input and the weight's rows both multiplied by
    an orthonormal Hadamard matrix in each block of 128 input features, which leaves ``x W^T``
    unchanged and spreads outliers over their block before either is quantized: :mod:`tcgemm.rotation`).

    Presets: :data:`W8A8_DYNAMIC` (the default), :data:`W8A8_STATIC`, :data:`W8A8_GROUP`,
    :data:`W8A8_CHANNEL_GROUP`, :data:`W8A8_BLOCK`, :data:`W8A8_ASYMMETRIC`, :data:`W8A8_STATIC_ASYMMETRIC`,
    :data:`W4A8` (4-bit weights, two-level scales), :data:`W4A8_GROUP` (4-bit weights, float group
    scales per 128 inputs; :data:`W4A8_GROUP64`, :data:`W4A8_GROUP32` per 64 or 32 inputs),
    :data:`W4A8_GROUP_ASYMMETRIC` (the same with zero points); ``PRESETS`` by name.

    Args:
        weights: the :class:`WeightArgs` (default: int8, one scale per channel).
        activations: the :class:`ActivationArgs` (default: dynamic, symmetric, per token).
        smooth: SmoothQuant's alpha in [0, 1] (ValueError outside), or None.
        rotate: a bool (TypeError otherwise): rotate the input features by blocks of 128.

    Constructing a scheme checks only these fields; whether a layer can run it (the
    combination) is :meth:`check_layer`'s ValueError, raised where a layer is built.

    Example:
        >>> s = QuantScheme.from_keywords(weight="block", activation="block")
        >>> s == W8A8_BLOCK
        True
        >>> dataclasses.replace(W8A8_STATIC, smooth=0.5)   # SmoothQuant on top of a preset
    """

    weights: WeightArgs = WeightArgs()
    activations: ActivationArgs = ActivationArgs()
    smooth: Optional[float] = None
    rotate: bool = False

    def __post_init__(self) -> None:
        if self.smooth is not None and not 0.0 <= float(self.smooth) <= 1.0:
            raise ValueError(f"smooth_factors: alpha must be in [0, 1], got {self.smooth}")
        if not isinstance(self.rotate, bool):
            raise TypeError(f"tcgemm.QuantScheme: rotate must be a bool, got {type(self.rotate).__name__}")

    # -- what a layer does with it ---------------------------------------------------------------
    @property
    def activation(self) -> str:
        """The layer's activation word ("token", "block" or "static"): the ``activation``
        argument of ``tcgemm.quant_linear``. ValueError for activations no layer runs."""
        for word, args in _LAYER_ACTIVATIONS.items():
            if (args.granularity, args.dynamic) == (self.activations.granularity, self.activations.dynamic):
                return word
        raise SchemeError(f"input activation strategy '{self.activations.granularity}' (dynamic={self.activations.dynamic}) "
                   f"is not dynamic token, dynamic group of {SCALE_BLOCK} or static tensor")

    @property
    def weight(self) -> str:
        """The weights' granularity: "channel", "group", "block" (or "tensor", checkpoints)."""
        return self.weights.granularity

    @property
    def asymmetric(self) -> bool:
        """Whether the activations are quantized with a zero point."""
        return not self.activations.symmetric

    @property
    def static(self) -> bool:
        """Whether the activations have a calibrated (static) scale."""
        return not self.activations.dynamic

    @property
    def per_block(self) -> bool:
        """Whether the GEMM's scales change along K (group or block weights, group activations)."""
        return self.weights.per_block or self.activations.per_block

    @property
    def needs_calibration(self) -> bool:
        """Whether building a layer needs calibrated input statistics (:func:`tcgemm.calibrate`)."""
        return self.static or self.smooth is not None

    def check_layer(self) -> "QuantScheme":
        """Raises ValueError if a :class:`tcgemm.QuantLinear` cannot run this scheme; returns it."""
        activation = self.activation
        check_weight_granularity(self.weight)
        if self.rotate and (self.smooth is not None or self.static or self.asymmetric):
            raise SchemeError(
                "rotate=True needs dynamic symmetric activations without SmoothQuant (the calibrated statistics "
                f"are of the unrotated input), got activation strategy '{self.activations.granularity}' "
                f"(dynamic={self.activations.dynamic}, symmetric={self.activations.symmetric}) and smooth={self.smooth}",
                "tcgemm.nn")
        if self.asymmetric and (self.weight != "channel" or activation == "block"):
            raise SchemeError(
                "asymmetric activations need weight='channel' and activation='token' or 'static', got asymmetric "
                f"activations with weight strategy '{self.weight}' and activation strategy "
                f"'{self.activations.granularity}'", "tcgemm.nn")
        return self

    # -- shorthands ------------------------------------------------------------------------------
    @classmethod
    def from_keywords(cls, weight: str = "channel", activation: str = "token", asymmetric: bool = False,
                      smooth: Optional[float] = None) -> "QuantScheme":
        """The scheme the keywords of ``QuantLinear`` and ``quantize_model`` stand for:
        ``weight`` "channel" | "group" | "block"; ``activation`` "token" (dynamic per token),
        "block" (dynamic per 1x128 group) or "static" (static per tensor); ``asymmetric``
        activations; ``smooth`` SmoothQuant's alpha."""
        check_weight_granularity(weight)
        if activation not in _LAYER_ACTIVATIONS:
            raise SchemeError(f"activation granularity must be one of {', '.join(map(repr, LAYER_ACTIVATIONS))}, "
                              f"got {activation!r}", "tcgemm.nn")
        acts = dataclasses.replace(_LAYER_ACTIVATIONS[activation], symmetric=not asymmetric)
        return cls(WeightArgs(weight), acts, smooth).check_layer()

    # -- compressed-tensors ----------------------------------------------------------------------
    def layer_scheme(self) -> "QuantScheme":
        """The scheme a layer runs this one as (per-tensor weights held per channel), checked."""
        return dataclasses.replace(self, weights=self.weights.layer_weights()).check_layer()

    def to_compressed_tensors(self) -> dict[str, dict[str, Any]]:
        """``weights`` and ``input_activations`` as keyword arguments of compressed-tensors'
        ``QuantizationArgs``; ``QuantizationScheme(targets=..., **{k: QuantizationArgs(**v) ...})``.
        SmoothQuant has no place in the format (ValueError)."""
        if self.smooth is not None:
            raise ValueError("tcgemm.QuantScheme: SmoothQuant multipliers have no place in compressed-tensors")
        if self.rotate:
            raise ValueError("tcgemm.QuantScheme: rotate=True (Hadamard-rotated inputs) has no place in "
                             "compressed-tensors' quantization schemes")
        return {"weights": self.weights.to_compressed_tensors(),
                "input_activations": self.activations.to_compressed_tensors()}

    @classmethod
    def from_compressed_tensors(cls, scheme: Any) -> "QuantScheme":
        """The scheme of a compressed-tensors ``QuantizationScheme`` (or its dict); ValueError
        naming the setting tcgemm does not run."""
        weights, acts = _field(scheme, "weights"), _field(scheme, "input_activations")
        if weights is None or acts is None:
            raise SchemeError("weights and input_activations must both be quantized (weight-only schemes are not W8A8)")
        return cls(WeightArgs.from_compressed_tensors(weights), ActivationArgs.from_compressed_tensors(acts))

    @property
    def bits(self) -> int:
        """The weights' bits: 8, or 4 (packed two to a byte)."""
        return self.weights.bits

    def __str__(self) -> str:
        text = f"weight={self.weight}" + (f", bits={self.bits}" if self.bits != 8 else "")
        text += f", group_size={self.weights.group_size}" if self.weights.group_size != SCALE_BLOCK else ""
        text += "" if self.weights.symmetric else ", weight zero points"
        text += f", activation={self.activation}"
        return (text + (", asymmetric" if self.asymmetric else "") + (f", smooth={self.smooth}" if self.smooth else "")
                + (", rotate" if self.rotate else ""))


W8A8_DYNAMIC = QuantScheme()
W8A8_STATIC = QuantScheme(activations=ActivationArgs("tensor", dynamic=False))
W8A8_GROUP = QuantScheme(weights=WeightArgs("group"), activations=ActivationArgs("group"))
# Per-channel weights with 1x128 activation groups: an outlier channel of x costs precision in
# its own group of 128 only, and the weight keeps one scale per channel.
W8A8_CHANNEL_GROUP = QuantScheme(activations=ActivationArgs("group"))
W8A8_BLOCK = QuantScheme(weights=WeightArgs("block"), activations=ActivationArgs("group"))
W8A8_ASYMMETRIC = QuantScheme(activations=ActivationArgs("token", symmetric=False))
W8A8_STATIC_ASYMMETRIC = QuantScheme(activations=ActivationArgs("tensor", dynamic=False, symmetric=False))
# 4-bit weights with two-level scales: the int8 GEMM of W8A8 per channel at half the weight bytes.
W4A8 = QuantScheme(WeightArgs("channel", bits=4))
# 4-bit weights with fp32 scales per 1x128 group (compressed-tensors' W4 group-128 checkpoints).
W4A8_GROUP = QuantScheme(WeightArgs("group", bits=4))
# The same with a zero point per group (asymmetric weights: AWQ, llm-compressor's W4A16_ASYM).
W4A8_GROUP_ASYMMETRIC = QuantScheme(WeightArgs("group", bits=4, symmetric=False))
# 4-bit weights with fp32 scales per 1x32 / 1x64 group (GPTQ checkpoints with group_size 32 or 64).
W4A8_GROUP32 = QuantScheme(WeightArgs("group", bits=4, group_size=32))
W4A8_GROUP64 = QuantScheme(WeightArgs("group", bits=4, group_size=64))

PRESETS: dict[str, QuantScheme] = {
    "w8a8": W8A8_DYNAMIC,
    "w8a8-static": W8A8_STATIC,
    "w8a8-group": W8A8_GROUP,
    "w8a8-channel-group": W8A8_CHANNEL_GROUP,
    "w8a8-block": W8A8_BLOCK,
    "w8a8-asymmetric": W8A8_ASYMMETRIC,
    "w8a8-static-asymmetric": W8A8_STATIC_ASYMMETRIC,
    "w4a8": W4A8,
    "w4a8-group": W4A8_GROUP,
    "w4a8-group-asymmetric": W4A8_GROUP_ASYMMETRIC,
    "w4a8-group32": W4A8_GROUP32,
    "w4a8-group64": W4A8_GROUP64,
}

# What every scheme= argument takes: a scheme, or the name of a preset.
SchemeLike = Union[QuantScheme, str]
# The keyword shorthands of QuantScheme.from_keywords, as types.
WeightGranularity = Literal["channel", "group", "block"]
ActivationGranularity = Literal["token", "block", "static"]


def as_scheme(where: str, scheme: SchemeLike) -> QuantScheme:
    """``scheme`` as a :class:`QuantScheme`: itself, or the preset of that name (:data:`PRESETS`).

    Args:
        where: the caller's name, the prefix of the error messages.
        scheme: a :class:`QuantScheme`, or a preset name such as ``"w8a8-block"``.

    Raises:
        ValueError: a name that is no preset (the message lists them).
        TypeError: anything else.
    """
    if isinstance(scheme, str):
        if scheme not in PRESETS:
            raise ValueError(f"{where}: scheme must be a QuantScheme or one of {', '.join(map(repr, PRESETS))}, "
                             f"got {scheme!r}")
        return PRESETS[scheme]
    if not isinstance(scheme, QuantScheme):
        raise TypeError(f"{where}: scheme must be a QuantScheme or a preset name, got {type(scheme).__name__}")
    return scheme


def resolve_scheme(where: str, scheme: Optional[SchemeLike], weight: str = "channel", activation: str = "token",
                   asymmetric: bool = False, smooth: Optional[float] = None) -> QuantScheme:
    """The scheme a layer is built with: ``scheme`` (a :class:`QuantScheme` or a preset name), or
    the one its keyword shorthands stand for (:meth:`QuantScheme.from_keywords`); never both.

    Args:
        where: the caller's name, the prefix of the error messages.
        scheme: a :class:`QuantScheme` or a preset name, or None for the shorthands.
        weight: shorthand: the weight granularity, "channel", "group" or "block".
        activation: shorthand: "token", "block" or "static".
        asymmetric: shorthand: activations with a zero point.
        smooth: shorthand: SmoothQuant's alpha in [0, 1], or None.

    Raises:
        ValueError: both ``scheme`` and a shorthand other than its default, an unknown preset
            name, or a scheme no layer can compute with.
        TypeError: a ``scheme`` that is neither a :class:`QuantScheme` nor a str.
    """
    if scheme is None:
        return QuantScheme.from_keywords(weight, activation, asymmetric, smooth)
    scheme = as_scheme(where, scheme)
    if (weight, activation, bool(asymmetric), smooth) != ("channel", "token", False, None):
        raise ValueError(f"{where}: pass scheme= or its shorthands weight=, activation=, asymmetric=, smooth=, "
                         "not both")
    return scheme.check_layer()

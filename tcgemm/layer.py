"""The quantized layer: :class:`QuantLinear`, a W8A8 or W4A8 drop-in replacement for ``nn.Linear``.

    lin = tcgemm.QuantLinear.from_linear(linear)                        # int8 weight, per-channel scales
    lin = tcgemm.QuantLinear.from_linear(linear, scheme="w4a8")         # 4-bit weights, int8 activations

A :class:`QuantLinear` holds its weight as int8 [N, K] (or packed 4-bit, :mod:`tcgemm.int4`) with
fp32 scales; its forward is one op, ``tcgemm.quant_linear``: the activations quantized on the fly
(the kernels of ``tcgemm.quantize``) and one fused int8 GEMM with the scales and bias applied in
its epilogue. Its state is plain tensors (buffers), so ``state_dict`` works with ``torch.save``
and safetensors. The int8 weight is frozen; gradients flow to the input (through the dequantized
weight, the quantization of the input taken as the identity) and to a bias that requires them,
so adapters such as LoRA train on a frozen int8 base.

The layer knows the recipes only as functions (:mod:`tcgemm.weights`, :mod:`tcgemm.gptq`,
:mod:`tcgemm.calibration`); whole-model conversion is :mod:`tcgemm.model`, and tensor parallelism
(:mod:`tcgemm.parallel`) plugs in through :func:`register_linear_adapter`.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

import torch
from torch import nn

from ._library import typed_error
from ._ops import unpack_int4
from ._scales import SCALE_BLOCK, expand_weight_scale
from .calibration import asymmetric_scale, smooth_factors
from .gptq import GPTQ, HessianLike, hessian_tensor
from .int4 import (GROUPED_KERNEL_ROWS, check_group_scale, check_int4_state, check_weight_scale, check_zero_point,
                   float_group_size, grouped_linear_by_phases)
from .rotation import rotate_blocks, rotate_hessian
from .scheme import ActivationGranularity, QuantScheme, SchemeLike, WeightGranularity, resolve_scheme
from .weights import quantize_weight

__all__ = ["LinearAdapter", "QuantLinear", "register_linear_adapter"]

_INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# torch.ops.tcgemm.quant_linear.default, looked up once (the chain of torch.ops lookups is per-call
# host time); importing ._ops has loaded the library. A constant: torch.compile guards on it once.
_QUANT_LINEAR = torch.ops.tcgemm.quant_linear.default

# A float layer whose weight is a tensor subclass (a DTensor of torch's tensor parallelism, say)
# is handed to the adapters in turn: each returns None (not its kind), or the plain nn.Linear to
# quantize and a function that takes the quantized layer to its final form (sharded the same way).
LinearAdapter = Callable[[nn.Linear, str], Optional[tuple[nn.Linear, Callable[["QuantLinear"], "QuantLinear"]]]]
_LINEAR_ADAPTERS: list[LinearAdapter] = []


def register_linear_adapter(adapter: LinearAdapter) -> LinearAdapter:
    """Registers ``adapter(linear, name)`` for :meth:`QuantLinear.from_linear` of a float layer
    whose weight is not a plain tensor (``tcgemm`` registers :mod:`tcgemm.parallel`'s, for
    DTensor weights). Returns ``adapter``, so it can be used as a decorator.

    Args:
        adapter: a callable ``(linear, name) -> None | (plain_linear, finish)``: None when the
            layer is not its kind; else an ``nn.Linear`` with plain tensors to quantize, and
            ``finish(quantized_layer) -> layer`` that gives the result ``from_linear`` returns.
    """
    if not callable(adapter):
        raise TypeError(f"register_linear_adapter: adapter must be callable, got {type(adapter).__name__}")
    _LINEAR_ADAPTERS.append(adapter)
    return adapter


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
        [out_features, ceil(in/128)] (``weight="group"``, 1x128 groups of each output channel;
        4-bit weights in groups of 64 or 32, ``"w4a8-group64"`` / ``"w4a8-group32"``:
        [out_features, ceil(in/64)] or [out_features, ceil(in/32)], fp32, bf16 or fp16: the dtype
        loaded or assigned, kept by ``.to(dtype)``) or
        [ceil(out/128), ceil(in/128)] (``weight="block"``, 128x128 blocks).
        ``weight_group_scale``: int8 [out_features, ceil(in/128)] with values in [1, 16], the
        integer group scales of 4-bit weights with two-level scales (:data:`tcgemm.W4A8`:
        ``weight = q * weight_group_scale * weight_scale`` per 1x128 group), else None.
        ``weight_zero_point``: int8 [out_features, ceil(in/128)] in [-8, 7], the zero points of
        asymmetric 4-bit weights (``"w4a8-group-asymmetric"``: ``weight = (q - weight_zero_point) *
        weight_scale`` per 1x128 group), else None.
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
    on ``q * weight_group_scale``, float group scales that of 1x128 weight groups. Groups of 64 or
    32 run on the op's few-rows kernel, and above ``tcgemm.int4.GROUPED_KERNEL_ROWS`` rows on a GPU
    by phases of GEMMs with groups of 128 (:func:`tcgemm.int4.grouped_linear_by_phases`).

    The plain constructor makes zero weights of the right shapes, for ``load_state_dict``
    (which checks the packed weight's dtype and the group scales' values);
    use :meth:`from_linear` to quantize a trained layer.

    Args:
        in_features: K, the size of each input row; even for 4-bit weights and a multiple of 128
            for a scheme with ``rotate=True`` (ValueError otherwise).
        out_features: N, the size of each output row.
        bias: whether the layer has an fp32 ``bias`` buffer [out_features] (zeros).
        weight: shorthand for the scheme's weight granularity: "channel", "group" or "block".
        activation: shorthand for the scheme's activations: "token", "block" or "static".
        device: where the buffers are allocated (default: torch's default device).
        smooth: whether the layer has a ``smooth`` buffer (SmoothQuant multipliers, ones); a
            scheme with ``smooth`` set has one too.
        asymmetric: shorthand: activations quantized with a zero point (per-channel weights,
            ``activation`` "token" or "static").
        scheme: a :class:`tcgemm.QuantScheme` or a preset name (``tcgemm.PRESETS``), instead of
            the shorthands ``weight``, ``activation`` and ``asymmetric``. Passing both, an unknown
            preset name or a scheme a layer cannot run raises ValueError; a ``scheme`` that is
            neither a scheme nor a str raises TypeError.

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
        self.scheme: QuantScheme = resolve_scheme("QuantLinear", scheme, weight, activation, asymmetric)
        self._op_activation = self.scheme.activation  # forward's argument, read once
        self._rotate = self.scheme.rotate
        # Float group scales per 64 or 32 inputs: forward's group size at many rows (0: none).
        self._phase_group = 0 if self.scheme.weights.group_size == SCALE_BLOCK else self.scheme.weights.group_size
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
        zero_shape = weights.zero_point_shape(n, k)
        self.register_buffer("weight_zero_point", None if zero_shape is None else
                             torch.zeros(zero_shape, dtype=torch.int8, device=device))
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

    def __setattr__(self, name: str, value) -> None:
        # Group scales enter a layer by assignment as well as by load_state_dict: checked the same
        # way (values in [1, 16], read back from a GPU: a synchronisation, at set-up time only).
        if name in ("weight_group_scale", "weight_zero_point") and isinstance(value, torch.Tensor) and \
                self.__dict__.get("_buffers", {}).get(name) is not None:
            check = check_group_scale if name == "weight_group_scale" else check_zero_point
            check("QuantLinear", value, self.out_features, self.in_features, what=f"argument '{name}'")
        elif name == "weight_scale" and isinstance(value, torch.Tensor) and float_group_size(self):
            check_weight_scale("QuantLinear", value, self.out_features, self.in_features, float_group_size(self))
        super().__setattr__(name, value)

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
        its unpacked values (times ``weight_group_scale``, or less ``weight_zero_point``, where the
        layer has it)."""
        if self.weight.dtype == torch.uint8:
            return unpack_int4(self.weight.detach(), self.weight_group_scale, self._buffers.get("weight_zero_point"))
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
        scale_dtype: torch.dtype = torch.float32,
    ) -> "QuantLinear":
        """Quantizes a trained ``nn.Linear`` (any float dtype, any device; it is left untouched).

        Args:
            linear: the float ``nn.Linear`` [out_features, in_features] to quantize (TypeError for
                anything else); the result's buffers are on its weight's device.
            scheme: a :class:`tcgemm.QuantScheme` or preset name (its ``smooth`` is the alpha
                below); or its shorthands ``weight``, ``activation``, ``asymmetric``, ``smooth``.
            weight: the weight granularity, "channel", "group" or "block" (see the class).
            activation: the activation granularity, "token", "block" or "static" (see the class).
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
            scale_dtype: the dtype of ``weight_scale`` (:func:`tcgemm.nn.quantize_weight`): bf16 or fp16
                with 4-bit weights in groups of 64 or 32, the weight rounded against those scales.

        Raises:
            TypeError: ``linear`` is not an ``nn.Linear``, or ``gptq`` is not a :class:`GPTQ`.
            ValueError: ``gptq`` without ``hessian`` or the reverse; ``activation="static"`` or
                ``smooth`` without ``input_amax``; static asymmetric activations without
                ``input_range``; ``input_amax`` or ``input_range`` not of shape [in_features]; a
                scheme the layer cannot run (see the constructor).

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
        scheme = resolve_scheme("QuantLinear.from_linear", scheme, weight, activation, asymmetric, smooth)
        if (gptq is None) != (hessian is None):
            raise ValueError(f"{where}: gptq= and hessian= go together (GPTQ needs the second moments of the layer's "
                             "input: Calibration.hessians of tcgemm.calibrate(model, second_moments=True))")
        if gptq is not None and not isinstance(gptq, GPTQ):
            raise TypeError(f"{where}: argument 'gptq' must be a tcgemm.GPTQ, got {type(gptq).__name__}")
        if hessian is not None:
            hessian = hessian_tensor(where, hessian, linear.in_features)
        finish = None
        if type(linear.weight) not in (nn.Parameter, torch.Tensor):  # a DTensor (tensor parallel), say
            for adapter in _LINEAR_ADAPTERS:
                adapted = adapter(linear, name)
                if adapted is not None:
                    linear, finish = adapted
                    break
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
        q, scale, *tables = quantize_weight(w, scheme.weight, bits=scheme.bits, hessian=hessian, gptq=gptq,
                                           symmetric=scheme.weights.symmetric, group_size=scheme.weights.group_size,
                                           scale_dtype=scale_dtype)
        module.weight.copy_(q)
        module.weight_scale = module.weight_scale.to(scale.dtype).copy_(scale)
        for name, table in zip(("weight_group_scale", "weight_zero_point"), tables):
            if table is not None:
                module._buffers[name].copy_(table)
        module.refresh_weight_colsum()
        if linear.bias is not None:
            module.bias.copy_(linear.bias.detach().to(torch.float32))
        return module if finish is None else finish(module)

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
            self.weight_scale, self.out_features, self.in_features, self.weight_granularity,
            self.scheme.weights.group_size)
        if self.smooth is not None:
            w = w * self.smooth  # the layer multiplies its input by smooth: this is the weight x meets
        return w.to(dtype)

    def _forward_2d(self, x2d: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        try:
            if self._phase_group and x2d.shape[0] > GROUPED_KERNEL_ROWS and x2d.is_cuda:
                return grouped_linear_by_phases(x2d, self.weight, self.weight_scale, self._phase_group, bias,
                                                self._op_activation, input_scale=self.input_scale,
                                                smooth=self.smooth, rotate=self._rotate)
            return _QUANT_LINEAR(
                x2d, self.weight, self.weight_scale, bias, activation=self._op_activation,
                input_scale=self.input_scale, smooth=self.smooth, asymmetric=self.asymmetric,
                input_zero_point=self.input_zero_point, weight_colsum=self.weight_colsum,
                weight_group_scale=self.weight_group_scale, rotate=self._rotate,
                weight_zero_point=self._buffers.get("weight_zero_point"),
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
            group_scale, zero_point = buffers["weight_group_scale"], buffers.get("weight_zero_point")
        except KeyError:
            weight, weight_scale, bias = self.weight, self.weight_scale, self.bias
            input_scale, smooth = self.input_scale, self.smooth
            input_zero_point, weight_colsum = self.input_zero_point, self.weight_colsum
            group_scale, zero_point = self.weight_group_scale, self._buffers.get("weight_zero_point")
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
        op, activation = _QUANT_LINEAR, self._op_activation
        try:
            # Float group scales per 64 or 32 inputs at many rows on a GPU: by phases (tcgemm.int4).
            if self._phase_group and x.numel() > GROUPED_KERNEL_ROWS * self.in_features and x.is_cuda:
                return grouped_linear_by_phases(x, weight, weight_scale, self._phase_group, bias, activation,
                                                input_scale=input_scale, smooth=smooth, rotate=self._rotate)
            if zero_point is not None:  # asymmetric 4-bit weights (per-group scales: symmetric activations)
                return op(x, weight, weight_scale, bias, activation, input_scale=input_scale, smooth=smooth,
                          rotate=self._rotate, weight_zero_point=zero_point)
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
        state.setdefault("_phase_group", 0)
        state.get("_buffers", {}).pop("hadamard", None)  # rotated layers once kept the matrix as a buffer
        super().__setstate__(state)
        for name in ("input_zero_point", "weight_colsum", "weight_group_scale", "weight_zero_point"):
            self._buffers.setdefault(name, None)

    def _apply(self, fn, recurse=True):
        # Module.half() / .to(torch.bfloat16) convert every floating buffer; the kernels want fp32
        # scales (4-bit ones per 64 or 32 inputs: the dtype they have) and rounding them would silently
        # cost accuracy, so scales and bias keep their dtype and follow only device moves. (The integer
        # weight and group scales are never converted: they are not floating point.)
        kept = {
            name: self._buffers[name]
            for name in ("weight_scale", "bias", "input_scale", "smooth")
            if self._buffers.get(name) is not None
        }
        super()._apply(fn, recurse)
        for name, old in kept.items():
            new = self._buffers[name]
            if new is not None and new.dtype != old.dtype:
                self._buffers[name] = old.to(device=new.device)
        return self

    def extra_repr(self) -> str:
        """The sizes and the scheme, shown by ``repr(layer)`` (and a tensor-parallel shard's place)."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"weight={self.weight_granularity!r}" + (f", bits={self.bits}" if self.bits != 8 else "")
            + (f", group_size={self._phase_group}" if self._phase_group else "")
            + (", weight_zero_point=True" if self._buffers.get("weight_zero_point") is not None else "")
            + f", activation={self.activation_granularity!r}"
            + (", smooth=True" if self.smooth is not None else "")
            + (", asymmetric=True" if self.asymmetric else "")
            + (", rotate=True" if self._rotate else "")
            + (f", {self.tensor_parallel.style} shard {self.tensor_parallel.rank}/{self.tensor_parallel.world_size}"
               if self.tensor_parallel is not None else "")
        )


def _refresh_colsum_after_load(module: QuantLinear, incompatible_keys) -> None:
    module.refresh_weight_colsum()  # a module-level function: modules with it still pickle


# The load_state_dict pre-hook of 4-bit layers, by the name layers pickled whole refer to.
_check_int4_state = check_int4_state


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



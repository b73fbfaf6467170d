"""Hugging Face transformers integration: ``quantization_config=tcgemm.hf.TcgemmConfig(...)``.

    import tcgemm.hf
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=tcgemm.hf.TcgemmConfig("w4a8"),
                                                 dtype=torch.bfloat16, device_map="cuda")
    model.save_pretrained("out")    # a compressed-tensors checkpoint (vLLM, llm-compressor read it)

Importing this module registers the quantization method "tcgemm" with transformers
(``register_quantization_config`` / ``register_quantizer``). ``from_pretrained`` of a float
checkpoint then builds the model with :class:`tcgemm.QuantLinear` layers on the meta device and
quantizes each weight as it arrives (round to nearest, the scheme's scales), so the float
weights are never all in memory at once: the same layers, bit for bit, as
:func:`tcgemm.quantize_model` on the model loaded in float. ``save_pretrained`` writes the
compressed-tensors checkpoint of :func:`tcgemm.compressed.save_compressed`; load it back at its
compressed size with :func:`tcgemm.compressed.from_pretrained`. Checked with transformers 5.17 and
5.24.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import torch
from torch import nn
from transformers.core_model_loading import ConversionOps
from transformers.quantizers import HfQuantizer, register_quantization_config, register_quantizer
from transformers.utils.quantization_config import QuantizationConfigMixin

from .fuse import fuse_siblings
from .layer import QuantLinear
from .model import skip_reason
from .scheme import PRESETS, as_scheme
from .weights import quantize_weight

__all__ = ["QUANT_METHOD", "TcgemmConfig", "TcgemmHfQuantizer"]

QUANT_METHOD = "tcgemm"


@register_quantization_config(QUANT_METHOD)
class TcgemmConfig(QuantizationConfigMixin):
    """How ``from_pretrained`` quantizes: a preset for every ``nn.Linear`` except the skipped ones.

    Args:
        scheme: a preset name of :data:`tcgemm.PRESETS` whose activations are dynamic (no
            calibration on load): "w8a8", "w8a8-group", "w8a8-channel-group", "w8a8-block",
            "w8a8-asymmetric", "w4a8", "w4a8-group", "w4a8-group64", "w4a8-group32" or
            "w4a8-group-asymmetric". Others raise ValueError.
        skip: qualified names or fnmatch patterns of layers left in float, as in
            :func:`tcgemm.quantize_model` (default: ``["lm_head"]``).
        fuse: after loading, stack each block's q/k/v and gate/up projections into one layer
            (:func:`tcgemm.fuse_siblings`); ``save_pretrained`` still writes them apart.
        kwargs: read back from a saved config (``quant_method``), otherwise refused.
    """

    def __init__(self, scheme: str = "w8a8", skip: Optional[Iterable[str]] = None, fuse: bool = False,
                 **kwargs: Any) -> None:
        kwargs.pop("quant_method", None)
        if kwargs:
            raise ValueError(f"tcgemm.hf.TcgemmConfig: unknown arguments {sorted(kwargs)}")
        if not isinstance(scheme, str) or scheme not in PRESETS:
            raise ValueError(f"tcgemm.hf.TcgemmConfig: scheme must be one of {', '.join(map(repr, PRESETS))}, "
                             f"got {scheme!r}")
        if as_scheme("tcgemm.hf.TcgemmConfig", scheme).needs_calibration:
            raise ValueError(f"tcgemm.hf.TcgemmConfig: scheme {scheme!r} needs calibration data; quantize on load "
                             "takes schemes with dynamic activations (then tcgemm.calibrate and quantize_model)")
        self.quant_method = QUANT_METHOD
        self.scheme = scheme
        self.skip = ["lm_head"] if skip is None else ([skip] if isinstance(skip, str) else list(skip))
        if not isinstance(fuse, bool):
            raise ValueError(f"tcgemm.hf.TcgemmConfig: fuse must be True or False, got {fuse!r}")
        self.fuse = fuse

    def to_dict(self) -> dict[str, Any]:
        """The config as ``config.json`` holds it."""
        return {"quant_method": self.quant_method, "scheme": self.scheme, "skip": list(self.skip), "fuse": self.fuse}


class _QuantizeOnLoad(ConversionOps):
    """A float weight as it arrives -> the QuantLinear's weight and scales (and a float bias -> fp32)."""

    def __init__(self, quantizer: "TcgemmHfQuantizer") -> None:
        self.quantizer = quantizer

    def convert(self, input_dict: dict[str, Any], full_layer_name: Optional[str] = None, **kwargs: Any
                ) -> dict[str, torch.Tensor]:
        (value,) = next(iter(input_dict.values()))
        prefix, _, attr = full_layer_name.rpartition(".")
        if attr == "bias":
            return {full_layer_name: value.float()}
        scheme = self.quantizer.scheme
        q, scale, *tables = quantize_weight(value, scheme.weight, bits=scheme.bits, symmetric=scheme.weights.symmetric,
                                           group_size=scheme.weights.group_size)
        out = {full_layer_name: q, f"{prefix}.weight_scale": scale}
        for name, table in zip(("weight_group_scale", "weight_zero_point"), tables):
            if table is not None:
                out[f"{prefix}.{name}"] = table
        return out


def _quant_linear_of(model: nn.Module, param_name: str) -> tuple[Optional[QuantLinear], str]:
    """The QuantLinear that holds tensor ``param_name`` (None if another module, or none, does),
    and the tensor's name in it."""
    prefix, _, attr = param_name.rpartition(".")
    try:
        module = model.get_submodule(prefix)
    except AttributeError:
        return None, attr
    return (module if isinstance(module, QuantLinear) else None), attr


@register_quantizer(QUANT_METHOD)
class TcgemmHfQuantizer(HfQuantizer):
    """transformers' side of :class:`TcgemmConfig`: swaps the model's ``nn.Linear`` layers for
    :class:`tcgemm.QuantLinear` before the weights load, quantizes each weight as it arrives, and
    saves compressed-tensors checkpoints.

    Args:
        quantization_config: the :class:`TcgemmConfig`.
        kwargs: transformers' (``pre_quantized``).
    """

    requires_calibration = False

    def __init__(self, quantization_config: TcgemmConfig, **kwargs: Any) -> None:
        super().__init__(quantization_config, **kwargs)
        self.scheme = as_scheme("tcgemm.hf", quantization_config.scheme)

    def validate_environment(self, *args: Any, **kwargs: Any) -> None:
        """Refuses a checkpoint that says it is already quantized with tcgemm (tcgemm saves
        compressed-tensors ones); nothing else to check: tcgemm runs on the CPU and on every CUDA
        GPU it was built for.

        Args:
            args: transformers' (unused).
            kwargs: transformers' (unused).
        """
        if self.pre_quantized:
            raise ValueError("tcgemm.hf: the checkpoint says it is quantized with tcgemm, but tcgemm saves "
                             "compressed-tensors checkpoints; load them with tcgemm.compressed.from_pretrained")

    def _process_model_before_weight_loading(self, model: nn.Module, **kwargs: Any) -> None:
        skip = tuple(self.quantization_config.skip)
        slots = [(parent, child_name, f"{prefix}{child_name}", child)
                 for prefix, parent in ((f"{n}." if n else "", m) for n, m in model.named_modules())
                 for child_name, child in parent._modules.items() if isinstance(child, nn.Linear)]
        for parent, child_name, name, child in slots:
            if skip_reason(name, child, parent, skip, 0, self.scheme) is None:
                layer = QuantLinear(child.in_features, child.out_features, bias=child.bias is not None,
                                    device=child.weight.device, scheme=self.scheme)
                if child.weight.is_meta:
                    # A float placeholder where the integer weight will be: transformers 5.17 (not
                    # 5.24) casts a tensor quantized on load to its placeholder's dtype before the
                    # conversion sees it, which would turn the float weight into int8. The
                    # conversion's weight replaces it; one that never arrives is named below.
                    layer._buffers["weight"] = torch.empty(child.weight.shape, dtype=child.weight.dtype,
                                                           device="meta")
                setattr(parent, child_name, layer)

    def param_needs_quantization(self, model: nn.Module, param_name: str, **kwargs: Any) -> bool:
        """Whether ``param_name`` is a QuantLinear's float weight or bias arriving from the checkpoint.

        Args:
            model: the model being loaded.
            param_name: a qualified tensor name.
            kwargs: transformers' (unused).
        """
        layer, attr = _quant_linear_of(model, param_name)
        return layer is not None and attr in ("weight", "bias")

    def param_element_size(self, model: nn.Module, param_name: str, param: torch.Tensor) -> float:
        """Bytes per element of ``param`` once loaded: a QuantLinear's float placeholder weight
        counts as the integer weight that replaces it (1 byte per value, 0.5 for 4-bit), so that
        transformers' warm-up of the CUDA caching allocator reserves the quantized size, not the
        float one.

        Args:
            model: the model being loaded.
            param_name: a qualified tensor name.
            param: the tensor (on the meta device).
        """
        layer, attr = _quant_linear_of(model, param_name)
        if layer is not None and attr == "weight" and param.is_floating_point():
            return layer.bits / 8
        return param.element_size()

    def get_quantize_ops(self) -> ConversionOps:
        """The conversion transformers applies to each weight :meth:`param_needs_quantization` names."""
        return _QuantizeOnLoad(self)

    def _process_model_after_weight_loading(self, model: nn.Module, **kwargs: Any) -> nn.Module:
        for name, module in model.named_modules():
            if isinstance(module, QuantLinear):
                if module.weight.dtype not in (torch.int8, torch.uint8):
                    raise ValueError(f"tcgemm.hf: layer '{name}' got no weight from the checkpoint (its weight "
                                     f"is still {module.weight.dtype}, not quantized)")
                module.refresh_weight_colsum()
        if self.quantization_config.fuse:
            fuse_siblings(model)
        return model

    def get_state_dict_and_metadata(self, model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """The compressed-tensors state of ``model`` (:func:`tcgemm.compressed.save_compressed`'s),
        and the model's config switched to the compressed-tensors ``quantization_config``, so that
        ``save_pretrained`` writes a checkpoint vLLM and llm-compressor read.

        Args:
            model: the model being saved.
        """
        from .compressed import compressed_state

        state, qconfig = compressed_state(model)
        model.config.quantization_config = qconfig
        return state, {}

    def is_serializable(self, **kwargs: Any) -> bool:
        """True: ``save_pretrained`` writes compressed-tensors checkpoints.

        Args:
            kwargs: transformers' (unused).
        """
        return True

    @property
    def is_trainable(self) -> bool:
        """False: the weights are frozen integers (gradients reach the inputs, not the weights)."""
        return False

    @property
    def is_compileable(self) -> bool:
        """True: every tcgemm op works under ``torch.compile``."""
        return True

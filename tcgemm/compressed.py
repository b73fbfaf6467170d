"""compressed-tensors W8A8 checkpoints: the format llm-compressor writes and vLLM serves.

    import tcgemm.compressed as ct
    report = ct.load_compressed(model, "path/to/checkpoint")   # Linear layers -> QuantLinear
    ct.save_compressed(model, "path/to/output")                  # model.safetensors + config.json

A checkpoint is a folder with ``config.json`` (its ``quantization_config``, quant_method
"compressed-tensors") and ``*.safetensors`` files. Each config group names the layers it covers
(``targets``: a class name such as "Linear", a module name, or "re:<regex>"; minus ``ignore``) and
how they are quantized. tcgemm runs the W8A8 int8 schemes:

- weights: int8, symmetric, one scale per output channel (``strategy: channel``), per tensor
  (``tensor``), per 1x128 group of each output channel (``group``, ``group_size 128``) or per
  128x128 block (``block``, ``block_structure [128, 128]``);
- input activations: int8, symmetric, dynamic per token (``token``), dynamic per 1x128 group
  (``group``, ``group_size 128``), or static per tensor (``tensor``, an ``input_scale``); or
  asymmetric (``symmetric: false``) per token or static per tensor (an ``input_zero_point``), with
  weights per channel or per tensor.

Anything else (other bit widths, weight-only schemes, weight zero points, fp8) raises a ValueError that
names the layer group and the setting. The config is read and written with the
``compressed-tensors`` package (``pip install compressed-tensors``), an optional dependency:
its own matching decides which layers a group covers.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch import nn

from ._scales import SCALE_BLOCK
from .nn import QuantLinear
from .scheme import QuantScheme, SchemeError

_CONFIG = "config.json"
# The tensors compressed-tensors adds to a quantized module.
_QUANT_SUFFIXES = (".weight_scale", ".weight_zero_point", ".input_scale", ".input_zero_point", ".output_scale",
                   ".output_zero_point", ".weight_g_idx")
_WEIGHTS = "model.safetensors"


def _ct():
    try:
        from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
        from compressed_tensors.utils.match import is_match
    except ImportError as e:  # pragma: no cover - exercised only without the package
        raise ImportError(
            "tcgemm.compressed needs the 'compressed-tensors' package (pip install compressed-tensors)"
        ) from e
    return QuantizationArgs, QuantizationConfig, QuantizationScheme, is_match


@dataclass
class CompressedReport:
    """What :func:`load_compressed` did: layers swapped to QuantLinear with their scheme, and
    the state-dict keys of the checkpoint that no module took."""

    loaded: dict[str, str] = field(default_factory=dict)  # name -> "weight=..., activation=..."
    unused_keys: list[str] = field(default_factory=list)


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def _scheme_of(group: str, ct_scheme) -> QuantScheme:
    """The tcgemm scheme of a config group (as the checkpoint states it: per-tensor weights stay
    per tensor), or ValueError naming the group and the setting tcgemm does not run."""
    try:
        scheme = QuantScheme.from_compressed_tensors(ct_scheme)
        scheme.layer_scheme()
    except SchemeError as e:
        raise ValueError(f"tcgemm.compressed: config group '{group}': {e.what}; tcgemm runs int8 W8A8 "
                         "(symmetric int8 weights per channel, tensor, 1x128 group or 128x128 block; int8 activations per "
                         "token, per 1x128 group or static per tensor, asymmetric per token or static per "
                         "tensor with channel or tensor weights)") from None
    return scheme


def _read_checkpoint(path: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    with open(os.path.join(path, _CONFIG)) as f:
        config = json.load(f)
    qconfig = config.get("quantization_config")
    if qconfig is None or qconfig.get("quant_method") != "compressed-tensors":
        raise ValueError(f"tcgemm.compressed: {os.path.join(path, _CONFIG)} has no compressed-tensors "
                         "quantization_config")
    tensors: dict[str, torch.Tensor] = {}
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"tcgemm.compressed: no .safetensors files in {path}")
    for name in files:
        tensors.update(load_file(os.path.join(path, name)))
    return qconfig, tensors


def _check_config(qconfig_dict: dict[str, Any]) -> None:
    """Refuses what tcgemm would otherwise ignore and compute wrongly without."""
    for key in ("transform_config", "sparsity_config"):
        if qconfig_dict.get(key):
            raise ValueError(f"tcgemm.compressed: the checkpoint has a {key} ({sorted(qconfig_dict[key])[:3]}...), "
                             "which tcgemm does not apply")
    for group, scheme in (qconfig_dict.get("config_groups") or {}).items():
        if isinstance(scheme, dict) and scheme.get("output_activations") is not None:
            raise ValueError(f"tcgemm.compressed: config group '{group}' quantizes output activations, "
                             "which tcgemm does not do")
    if qconfig_dict.get("kv_cache_scheme") is not None:
        raise ValueError("tcgemm.compressed: the checkpoint quantizes the KV cache (kv_cache_scheme), "
                         "which tcgemm does not do")


def _parents(model: nn.Module) -> dict[int, list[tuple[nn.Module, str]]]:
    """Every (parent, attribute) slot holding each module, by id (a shared module has several)."""
    slots: dict[int, list[tuple[nn.Module, str]]] = {}
    for parent in model.modules():
        for child_name, child in parent._modules.items():
            if child is not None:
                slots.setdefault(id(child), []).append((parent, child_name))
    return slots


def load_compressed(model: nn.Module, path: str, *, device: Optional[torch.device] = None) -> CompressedReport:
    """Loads a compressed-tensors W8A8 checkpoint (a folder) into ``model`` in place: every
    ``nn.Linear`` a config group covers becomes a :class:`QuantLinear` holding the checkpoint's int8
    weight and scales; the other tensors of the checkpoint load into the model as they are.

    ``model`` has the checkpoint's architecture in floating point (e.g. built from its config);
    the new layers go to ``device`` (default: where the replaced layer's weight was). Anything the
    checkpoint holds that tcgemm would not use (a covered module that is not an ``nn.Linear``, a
    quantized tensor no layer takes, a bias on one side only, transforms, a quantized KV cache)
    raises a ValueError before the model is changed.
    """
    _, QuantizationConfig, _, is_match = _ct()
    qconfig_dict, tensors = _read_checkpoint(path)
    _check_config(qconfig_dict)
    qconfig = QuantizationConfig.model_validate(qconfig_dict)
    fmt = qconfig.format
    if fmt not in ("int-quantized", "naive-quantized"):
        raise ValueError(f"tcgemm.compressed: checkpoint format '{fmt}' is not 'int-quantized' or 'naive-quantized'")
    schemes = {g: (s, _scheme_of(g, s)) for g, s in qconfig.config_groups.items()}
    report = CompressedReport()
    taken: set[str] = set()
    replacements: list[tuple[nn.Module, QuantLinear]] = []
    seen: dict[int, str] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        groups = [g for g, (s, _) in schemes.items() if is_match(name, module, s.targets, qconfig.ignore or [])]
        if not groups:
            continue
        if not isinstance(module, nn.Linear):
            raise ValueError(f"tcgemm.compressed: config group '{groups[0]}' covers '{name}', a "
                             f"{type(module).__name__}; tcgemm quantizes nn.Linear layers only")
        if not name:
            raise ValueError("tcgemm.compressed: the model itself is a Linear; load into a model that contains it")
        if id(module) in seen:
            raise ValueError(f"tcgemm.compressed: '{name}' and '{seen[id(module)]}' are one shared Linear; "
                             "the checkpoint holds one quantized weight per name")
        seen[id(module)] = name
        if len(groups) > 1:
            raise ValueError(f"tcgemm.compressed: layer '{name}' matches config groups {groups}")
        scheme = schemes[groups[0]][1]
        dev = device if device is not None else module.weight.device
        replacements.append((module, _layer_from_tensors(name, module, tensors, scheme, dev, taken)))
        report.loaded[name] = str(scheme)
    leftover = sorted(k for k in tensors if k not in taken and (tensors[k].dtype == torch.int8 or k.endswith(_QUANT_SUFFIXES)))
    if leftover:
        raise ValueError(f"tcgemm.compressed: {len(leftover)} quantized tensors of the checkpoint belong to no "
                         f"covered nn.Linear, e.g. {leftover[:3]}")
    slots = _parents(model)
    for module, layer in replacements:
        for parent, child_name in slots[id(module)]:
            setattr(parent, child_name, layer)
    rest = {k: v for k, v in tensors.items() if k not in taken}
    missing, unexpected = model.load_state_dict(rest, strict=False)
    report.unused_keys = sorted(unexpected)
    if hasattr(model, "tie_weights"):  # transformers: a tied lm_head is left out of checkpoints
        model.tie_weights()
    loaded_storage = {t.data_ptr() for k, t in model.state_dict().items() if k in rest}
    missing = [k for k in missing if not any(k.startswith(n + ".") for n in report.loaded)
               and model.state_dict()[k].data_ptr() not in loaded_storage]
    if missing:
        raise ValueError(f"tcgemm.compressed: the checkpoint lacks {len(missing)} tensors of the model, "
                         f"e.g. {missing[:3]}")
    return report


def _layer_from_tensors(name: str, linear: nn.Linear, tensors: dict[str, torch.Tensor], scheme: QuantScheme,
                        device, taken: set[str]) -> QuantLinear:
    def get(key: str, required: bool = True) -> Optional[torch.Tensor]:
        full = f"{name}.{key}"
        if full not in tensors:
            if required:
                raise ValueError(f"tcgemm.compressed: the checkpoint has no '{full}'")
            return None
        taken.add(full)
        return tensors[full]

    n, k = linear.out_features, linear.in_features
    qw = get("weight")
    if qw.dtype != torch.int8 or tuple(qw.shape) != (n, k):
        raise ValueError(f"tcgemm.compressed: '{name}.weight' must be int8 [{n}, {k}], got {qw.dtype} "
                         f"{list(qw.shape)} (is the checkpoint int-quantized?)")
    wz = get("weight_zero_point", required=False)
    if wz is not None and bool(wz.ne(0).any()):
        raise ValueError(f"tcgemm.compressed: '{name}.weight_zero_point' is not zero (weight zero points are not "
                         "supported)")
    # A static asymmetric layer reads its zero point below; anywhere else one must be zero.
    static_asymmetric = scheme.asymmetric and scheme.static
    iz = get("input_zero_point", required=static_asymmetric)
    if iz is not None and not static_asymmetric and bool(iz.ne(0).any()):
        raise ValueError(f"tcgemm.compressed: '{name}.input_zero_point' is not zero, but the config group's "
                         "activations are symmetric or dynamic")
    sw = get("weight_scale").float()
    weight = scheme.weight
    layer = QuantLinear(k, n, bias=linear.bias is not None, device=device, scheme=scheme.layer_scheme())
    if scheme.weights.per_block:
        expected = tuple(layer.weight_scale.shape)
        if tuple(sw.shape) != expected:
            what = f"{SCALE_BLOCK}x{SCALE_BLOCK} blocks" if weight == "block" else f"groups of {SCALE_BLOCK}"
            raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' must be {list(expected)} for {what}, "
                             f"got {list(sw.shape)}")
    elif weight == "tensor":
        if sw.numel() != 1:
            raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' must have one element, got {list(sw.shape)}")
        sw = sw.reshape(1).expand(n)
    elif sw.numel() != n:
        raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' must be [{n}, 1], got {list(sw.shape)}")
    bias = get("bias", required=False)
    if (bias is None) != (linear.bias is None):
        raise ValueError(f"tcgemm.compressed: '{name}' has a bias in the "
                         f"{'model' if bias is None else 'checkpoint'} but not in the "
                         f"{'checkpoint' if bias is None else 'model'}")
    with torch.no_grad():
        layer.weight.copy_(qw)
        layer.weight_scale.copy_(sw.reshape(layer.weight_scale.shape))
        if layer.bias is not None:
            layer.bias.copy_(bias.float())
        if scheme.static:
            s = get("input_scale").float()
            if s.numel() != 1:
                raise ValueError(f"tcgemm.compressed: '{name}.input_scale' must have one element, got {list(s.shape)}")
            layer.input_scale.copy_(s.reshape(()))
        if layer.input_zero_point is not None:
            if iz.numel() != 1 or iz.is_floating_point() or not -128 <= int(iz.reshape(())) <= 127:
                raise ValueError(f"tcgemm.compressed: '{name}.input_zero_point' must be one integer in [-128, 127], "
                                 f"got {iz.dtype} {list(iz.shape)}")
            layer.input_zero_point.copy_(iz.reshape(()).to(torch.int32))
        layer.refresh_weight_colsum()
    return layer


def save_compressed(model: nn.Module, path: str) -> None:
    """Writes ``model`` as a compressed-tensors W8A8 checkpoint: ``model.safetensors`` (the int8
    weights and their scales for every QuantLinear, every other tensor of the state dict as it is)
    and the ``quantization_config`` of ``config.json`` (merged into an existing one, e.g. written
    by ``model.config.save_pretrained(path)``): one config group per weight/activation scheme,
    targeting its layers by name. Layers with SmoothQuant multipliers cannot be expressed in the
    format (the multiplier belongs in the preceding op) and raise a ValueError."""
    from safetensors.torch import save_file

    QuantizationArgs, QuantizationConfig, QuantizationScheme, _ = _ct()
    os.makedirs(path, exist_ok=True)
    state = {k: v for k, v in model.state_dict().items()}
    groups: dict[QuantScheme, list[str]] = {}
    for name, module in model.named_modules():
        if not isinstance(module, QuantLinear):
            continue
        if module.smooth is not None:
            raise ValueError(f"tcgemm.compressed: layer '{name}' has SmoothQuant multipliers, which the "
                             "compressed-tensors format has no place for")
        groups.setdefault(module.scheme, []).append(name)
        prefix = f"{name}." if name else ""
        if module.weight_granularity == "channel":
            state[prefix + "weight_scale"] = module.weight_scale.reshape(-1, 1)
        if module.input_scale is not None:
            state[prefix + "input_scale"] = module.input_scale.reshape(1)
        if module.input_zero_point is not None:  # the format's int8 zero point
            state[prefix + "input_zero_point"] = module.input_zero_point.reshape(1).to(torch.int8)
    if not groups:
        raise ValueError("tcgemm.compressed: the model has no QuantLinear layers to save")
    config_groups = {}
    ordered = sorted(groups.items(), key=lambda item: (item[0].weight, item[0].activation, item[0].asymmetric))
    for i, (scheme, names) in enumerate(ordered):
        config_groups[f"group_{i}"] = QuantizationScheme(
            targets=[f"re:^{re.escape(n)}$" for n in names],
            **{role: QuantizationArgs(**args) for role, args in scheme.to_compressed_tensors().items()},
        )
    qconfig = QuantizationConfig(config_groups=config_groups, format="int-quantized", quantization_status="compressed")
    # Tied tensors (e.g. an lm_head sharing the embedding) are written once, as transformers does.
    written: dict[tuple[int, tuple[int, ...]], str] = {}
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if v is None:
            continue
        key = (v.data_ptr(), tuple(v.shape))
        if v.numel() > 0 and key in written:
            continue
        written[key] = k
        out[k] = v.detach().contiguous().cpu()
    save_file(out, os.path.join(path, _WEIGHTS))
    config_path = os.path.join(path, _CONFIG)
    config: dict[str, Any] = {}
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = json.load(f)
    config["quantization_config"] = qconfig.model_dump(mode="json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)

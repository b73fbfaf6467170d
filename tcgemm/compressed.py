"""compressed-tensors checkpoints: the format llm-compressor writes and vLLM serves.

    import tcgemm.compressed as ct
    report = ct.load_compressed(model, "path/to/checkpoint")   # Linear layers -> QuantLinear
    ct.save_compressed(model, "path/to/output")                  # model.safetensors + config.json

A checkpoint is a folder with ``config.json`` (its ``quantization_config``, quant_method
"compressed-tensors") and ``*.safetensors`` files. Each config group names the layers it covers
(``targets``: a class name such as "Linear", a module name, or "re:<regex>"; minus ``ignore``),
how they are quantized and how the weights are stored (the group's ``format``, else the
checkpoint's). tcgemm runs:

- W8A8, int8 weights stored as they are (format ``int-quantized`` or ``naive-quantized``):
  symmetric, one scale per output channel (``strategy: channel``), per tensor (``tensor``), per
  1x128 group of each output channel (``group``, ``group_size 128``) or per 128x128 block
  (``block``, ``block_structure [128, 128]``);
- W4A8, 4-bit weights (``num_bits 4``), symmetric, one float scale per 1x128 group
  (``group``, ``group_size 128``), or per 1x64 or 1x32 group (``group_size`` 64 or 32, what many
  GPTQ checkpoints hold): packed eight to an int32 (``pack-quantized``: ``weight_packed``
  int32 [N, ceil(K/8)] holding ``q + 8`` with value i of each word at bits 4i, ``weight_shape``
  [N, K]), or one to an int8 (``int-quantized``, what compressed-tensors writes for W4A8 unless
  told ``pack-quantized``). A layer holds them packed two to a byte with float group scales
  [N, ceil(K/group_size)] (``WeightArgs("group", bits=4, group_size=...)``, the presets
  "w4a8-group", "w4a8-group64" and "w4a8-group32"; per 64 or 32 inputs in the checkpoint's dtype,
  fp32, bf16 or fp16, which a save writes back). Weight-only 4-bit checkpoints (W4A16,
  e.g. GPTQ by llm-compressor, no ``input_activations``) run as W4A8: their layers quantize
  their inputs to int8 dynamically per token. GPTQ's activation ordering ``weight`` (or
  ``static``) keeps the groups contiguous; a ``weight_g_idx`` that assigns columns to groups other
  than k // group_size (``actorder: group``) is refused;
- asymmetric 4-bit weights (``symmetric: false``, a ``weight_zero_point`` per group of 128 or per
  channel: ``W4A16_ASYM``, what llm-compressor's AWQ writes), packed or one to an int8, with their
  zero points packed eight to an int32 along the output channels or one to an int8. A layer holds
  them at their size: packed 4-bit with an int8 zero point and an fp32 scale per 1x128 group
  (``WeightArgs("group", bits=4, symmetric=False)``, the preset "w4a8-group-asymmetric"; per-channel
  ones repeated over the groups), and saves them back so (``pack-quantized``, the zero points packed
  along the output channels);
- input activations: int8, symmetric, dynamic per token (``token``), dynamic per 1x128 group
  (``group``, ``group_size 128``), or static per tensor (``tensor``, an ``input_scale``); or
  asymmetric (``symmetric: false``) per token or static per tensor (an ``input_zero_point``), with
  8-bit weights per channel or per tensor.

Anything else (other bit widths, 8-bit ``pack-quantized`` weights, other group sizes (16, 256, ...;
asymmetric 4-bit or 8-bit weights in groups other than 128), 8-bit
weight-only schemes, 8-bit weight zero points, fp8) raises a ValueError that names the config group and
the setting. The config is read and written with the ``compressed-tensors`` package
(``pip install compressed-tensors``), an optional dependency: its own matching decides which
layers a group covers.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch import nn

from ._scales import SCALE_BLOCK, int4_scale_dtypes
from .checkpoint import Reader, load_state, parents, write_sharded
from ._ct_layout import PACKED as _PACKED
from ._ct_layout import PACKED_BITS as _PACKED_BITS
from ._ct_layout import asymmetric_4bit_tables as _asymmetric_4bit_tables
from ._ct_layout import pack_checkpoint_zero_points as _pack_checkpoint_zero_points
from ._ct_layout import check_int4_values as _check_int4_values
from ._ct_layout import int8_weight as _int8_weight
from ._ct_layout import pack_checkpoint_int4 as _pack_checkpoint_int4
from ._ct_layout import unpack_checkpoint_int4 as _unpack_checkpoint_int4
from .int4 import factor_group_scales, pack_int4
from .layer import QuantLinear
from .scheme import ActivationArgs, QuantScheme, SchemeError, WeightArgs

_CONFIG = "config.json"
# The tensors compressed-tensors adds to a quantized module.
_QUANT_SUFFIXES = (".weight_scale", ".weight_zero_point", ".input_scale", ".input_zero_point", ".output_scale",
                   ".output_zero_point", ".weight_g_idx", ".weight_packed", ".weight_shape")
# How a config group's weights are stored: integers one to an int8 (any bits tcgemm runs), or
# 4-bit integers packed eight to an int32; a checkpoint whose groups differ says "mixed-precision"
# and each group names its own.
_UNPACKED = ("int-quantized", "naive-quantized")
_MIXED = "mixed-precision"
# GPTQ's activation ordering that assigns columns to groups through a g_idx: compressed-tensors
# no longer reads these values, older checkpoints hold them (and their weight_g_idx).
_GROUP_ACTORDER = ("group", "dynamic", True)
_RUNS = ("tcgemm runs W8A8 (symmetric int8 weights per channel, tensor, 1x128 group or 128x128 block; int8 "
         "activations per token, per 1x128 group or static per tensor, asymmetric per token or static per tensor "
         "with channel or tensor weights) and W4A8 (symmetric 4-bit weights in groups of 128, 64 or 32, int8 "
         "activations "
         "per token, per 1x128 group or static per tensor; weight-only 4-bit runs with dynamic per-token "
         "activations; asymmetric 4-bit weights in groups of 128 or per channel keep their zero points)")


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
    the state-dict keys of the checkpoint that no module took.

    Args:
        loaded: qualified layer name -> its scheme, as ``str(QuantScheme)``
            (``"weight=channel, activation=token"``).
        unused_keys: the checkpoint's tensor names that no module of the model took.
    """

    loaded: dict[str, str] = field(default_factory=dict)  # name -> "weight=..., activation=..."
    unused_keys: list[str] = field(default_factory=list)


def _value(v: Any) -> Any:
    return getattr(v, "value", v)


def _group_format(group: str, ct_scheme, checkpoint_format: str) -> str:
    """How a config group's weights are stored: its own format, else the checkpoint's."""
    fmt = _value(ct_scheme.format) or checkpoint_format
    if fmt == _MIXED:
        raise ValueError(f"tcgemm.compressed: config group '{group}' has no format of its own in a '{_MIXED}' "
                         "checkpoint")
    return fmt


def _asymmetric_4bit_scheme(ct_scheme) -> QuantScheme:
    """The layer scheme of asymmetric 4-bit weights: packed 4-bit with a zero point and an fp32
    scale per group of 128 (a checkpoint's per-channel ones repeated over the groups), and its
    activations (weight-only: dynamic per token); SchemeError for other strategies and group sizes."""
    weights = ct_scheme.weights
    strategy = _value(weights.strategy)
    if strategy == "group" and weights.group_size != SCALE_BLOCK or strategy not in ("group", "channel"):
        raise SchemeError(f"weights are asymmetric 4-bit int with strategy '{strategy}' (group_size "
                          f"{weights.group_size}); asymmetric 4-bit weights are read per group of {SCALE_BLOCK} "
                          "or per channel")
    acts = ct_scheme.input_activations
    activations = ActivationArgs() if acts is None else ActivationArgs.from_compressed_tensors(acts)
    return QuantScheme(WeightArgs("group", bits=_PACKED_BITS, symmetric=False), activations)


def _scheme_of(group: str, ct_scheme, fmt: str) -> tuple[QuantScheme, Optional[str]]:
    """The tcgemm scheme of a config group whose weights are stored in ``fmt`` (as the
    checkpoint states it: per-tensor weights stay per tensor; weight-only 4-bit weights get
    dynamic per-token activations; asymmetric 4-bit weights keep their zero points per group of
    128), and the strategy of its weight zero points ("group", "channel", or None: symmetric); or
    ValueError naming the group and the setting tcgemm does not run."""
    bits = _value(getattr(ct_scheme.weights, "num_bits", None))
    asymmetric = ct_scheme.weights is not None and not ct_scheme.weights.symmetric
    zero_points = _value(ct_scheme.weights.strategy) if asymmetric else None
    try:
        if fmt not in _UNPACKED + (_PACKED,):
            raise SchemeError(f"format '{fmt}' is not {', '.join(map(repr, _UNPACKED))} or '{_PACKED}'")
        if fmt == _PACKED and bits != _PACKED_BITS:
            raise SchemeError(f"weights are {bits}-bit in format '{_PACKED}'; tcgemm reads {_PACKED_BITS}-bit weights "
                              f"'{_PACKED}' and 8-bit weights {' or '.join(map(repr, _UNPACKED))}")
        if zero_points and bits != _PACKED_BITS:
            raise SchemeError(f"weights are asymmetric {bits}-bit int: q - zero_point would span beyond int8 "
                              "(tcgemm reads asymmetric 4-bit weights)")
        if zero_points:
            scheme = _asymmetric_4bit_scheme(ct_scheme)
        else:
            if ct_scheme.input_activations is None and bits == _PACKED_BITS:  # weight-only (W4A16): runs as W4A8
                ct_scheme = {"weights": ct_scheme.weights,
                             "input_activations": ActivationArgs().to_compressed_tensors()}
            scheme = QuantScheme.from_compressed_tensors(ct_scheme)
        scheme.layer_scheme()
    except SchemeError as e:
        raise ValueError(f"tcgemm.compressed: config group '{group}': {e.what}; {_RUNS}") from None
    return scheme, zero_points


def _read_checkpoint(path: str) -> tuple[dict[str, Any], Reader]:
    """The checkpoint's quantization config, and a reader of its tensors (nothing read yet)."""
    with open(os.path.join(path, _CONFIG)) as f:
        config = json.load(f)
    qconfig = config.get("quantization_config")
    if qconfig is None or qconfig.get("quant_method") != "compressed-tensors":
        raise ValueError(f"tcgemm.compressed: {os.path.join(path, _CONFIG)} has no compressed-tensors "
                         "quantization_config")
    try:
        return qconfig, Reader(path)
    except ValueError as e:
        raise ValueError(str(e).replace("tcgemm.checkpoint", "tcgemm.compressed")) from None


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


def _readable(qconfig_dict: dict[str, Any]) -> dict[str, Any]:
    """The config without the activation orderings compressed-tensors no longer reads
    (``actorder: group``): whether such a group's columns are in groups of k // 128 is its
    ``weight_g_idx``'s to say (:func:`_check_g_idx`)."""
    qconfig_dict = copy.deepcopy(qconfig_dict)
    for scheme in (qconfig_dict.get("config_groups") or {}).values():
        weights = scheme.get("weights") if isinstance(scheme, dict) else None
        if isinstance(weights, dict) and weights.get("actorder") in _GROUP_ACTORDER:
            weights["actorder"] = None
    return qconfig_dict


def load_compressed(model: nn.Module, path: str, *, device: Optional[torch.device] = None) -> CompressedReport:
    """Loads a compressed-tensors W8A8 or W4A8 checkpoint (a folder) into ``model`` in place:
    every ``nn.Linear`` a config group covers becomes a :class:`QuantLinear` holding the
    checkpoint's int8 weight, or its 4-bit weight packed two to a byte, and scales; the other
    tensors of the checkpoint load into the model as they are. A weight-only 4-bit group (W4A16)
    gives layers with dynamic per-token int8 activations (W4A8).

    Into a model whose ``nn.Linear`` layers were sharded by torch's tensor-parallel styles
    (DTensor weights, ``Shard(0)`` or ``Shard(1)``), each rank reads the whole checkpoint and keeps
    its shards: the layers become sharded :class:`QuantLinear` with tcgemm's styles of the same
    placement (:mod:`tcgemm.parallel`).

    ``model`` has the checkpoint's architecture in floating point (e.g. built from its config),
    in memory or on the meta device (``with torch.device("meta"): ...``, then ``device=`` is
    needed; :func:`from_pretrained` does both). The checkpoint is read one tensor at a time
    (``model.safetensors``, or the shards its ``model.safetensors.index.json`` names), so the
    memory it takes is the loaded model's and one tensor: the new layers go to ``device``
    (default: where the replaced layer's weight was), every other tensor is copied into the
    model's, or put on ``device`` in place of a meta one; modules whose buffers are computed
    rather than saved (rotary tables) are built again there (:func:`tcgemm.checkpoint.load_state`).
    4-bit float group scales that factor exactly into a channel scale times integers in [1, 16]
    (what :func:`save_compressed` writes for two-level layers) load as two-level layers ("w4a8").
    A tensor the checkpoint lacks, or one left on the meta device, raises a ValueError naming it.
    Anything the
    checkpoint holds that tcgemm would not use (a covered module that is not an ``nn.Linear``, a
    quantized tensor no layer takes, a bias on one side only, transforms, a quantized KV cache)
    raises a ValueError before the model is changed.

    Args:
        model: the float model to load into, in place.
        path: the checkpoint folder: ``config.json`` with a compressed-tensors
            ``quantization_config`` and one or more ``*.safetensors`` files (ValueError without
            them; a missing ``config.json`` raises FileNotFoundError).
        device: where the new layers go (default: each replaced layer's weight's device), and
            the tensors that replace meta ones.

    Returns:
        a :class:`CompressedReport`.
    """
    _, QuantizationConfig, _, is_match = _ct()
    qconfig_dict, tensors = _read_checkpoint(path)
    _check_config(qconfig_dict)
    qconfig = QuantizationConfig.model_validate(_readable(qconfig_dict))
    formats = _UNPACKED + (_PACKED, _MIXED)
    if qconfig.format not in formats:
        raise ValueError(f"tcgemm.compressed: checkpoint format '{qconfig.format}' is not "
                         f"{', '.join(map(repr, formats[:-1]))} or '{formats[-1]}'")
    schemes = {}
    for g, s in qconfig.config_groups.items():
        fmt = _group_format(g, s, qconfig.format)
        schemes[g] = (s, *_scheme_of(g, s, fmt), fmt)
    report = CompressedReport()
    taken: set[str] = set()
    replacements: list[tuple[nn.Module, QuantLinear]] = []
    seen: dict[int, str] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        groups = [g for g, (s, *_) in schemes.items() if is_match(name, module, s.targets, qconfig.ignore or [])]
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
        _, scheme, zero_points, fmt = schemes[groups[0]]
        dev = device if device is not None else module.weight.device
        if torch.device(dev).type == "meta":
            raise ValueError(f"tcgemm.compressed: layer '{name}' is on the meta device; pass device= (where the "
                             "loaded model goes)")
        layer = _layer_from_tensors(name, groups[0], module, tensors, scheme, fmt, dev, taken, zero_points)
        if type(module.weight) not in (nn.Parameter, torch.Tensor):  # sharded by torch's tensor-parallel styles
            from . import parallel

            sharding = parallel.torch_sharding(module, name)
            if sharding is not None:
                parallel.shard_like(layer, *sharding, name=name)
        replacements.append((module, layer))
        report.loaded[name] = str(layer.scheme)
    leftover = sorted(k for k in tensors.keys() if k not in taken
                      and (k.endswith(_QUANT_SUFFIXES) or tensors.dtype(k) == torch.int8))
    if leftover:
        raise ValueError(f"tcgemm.compressed: {len(leftover)} quantized tensors of the checkpoint belong to no "
                         f"covered nn.Linear, e.g. {leftover[:3]}")
    slots = parents(model)
    for module, layer in replacements:
        for parent, child_name in slots[id(module)]:
            setattr(parent, child_name, layer)
    report.unused_keys = load_state(model, tensors, device, skip=taken, owned=set(report.loaded),
                                    where="tcgemm.compressed")
    return report


def from_pretrained(path: str, *, device: Union[str, torch.device, None] = None,
                    dtype: Optional[torch.dtype] = None) -> nn.Module:
    """A transformers causal LM from a compressed-tensors checkpoint folder, loaded at its
    compressed size: the architecture is built from the folder's ``config.json`` on the meta
    device (no memory), then :func:`load_compressed` streams the checkpoint onto ``device``
    tensor by tensor, its covered layers as :class:`QuantLinear`. Returns the model in eval mode.

    Args:
        path: the checkpoint folder (``config.json`` with the model's config and its
            ``quantization_config``; ``model.safetensors`` or shards with their index).
        device: where the model goes (default: the current CUDA device, else the CPU).
        dtype: the dtype of the tensors that stay floating point (embeddings, norms, an lm_head
            the checkpoint keeps in float); default: the config's ``dtype``, else float32.

    Example:
        >>> model = tcgemm.compressed.from_pretrained("Llama-3-8B-W4A8", device="cuda")
    """
    import transformers

    config = transformers.AutoConfig.from_pretrained(path)
    if dtype is None:
        dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    model.to(dtype)
    load_compressed(model, path, device=device)
    return model.eval()


def _layer_from_tensors(name: str, group: str, linear: nn.Linear, tensors: dict[str, torch.Tensor],
                        scheme: QuantScheme, fmt: str, device, taken: set[str],
                        zero_points: Optional[str] = None) -> QuantLinear:
    def get(key: str, required: bool = True) -> Optional[torch.Tensor]:
        full = f"{name}.{key}"
        if full not in tensors:
            if required:
                raise ValueError(f"tcgemm.compressed: the checkpoint has no '{full}'")
            return None
        taken.add(full)
        return tensors.load(full)

    n, k = linear.out_features, linear.in_features
    if scheme.bits == _PACKED_BITS and k % 2:
        raise ValueError(f"tcgemm.compressed: config group '{group}' covers '{name}' with in_features {k}; "
                         "tcgemm's 4-bit weights need an even in_features")
    zp = None
    if zero_points:  # asymmetric 4-bit weights: packed q and a zero point per group of 128
        qw, zp = _asymmetric_4bit_tables(name, zero_points, fmt, get, n, k)
    elif fmt == _PACKED:
        qw = _unpack_checkpoint_int4(name, get("weight_packed"), get("weight_shape", required=False), n, k)
    else:
        qw = _int8_weight(name, get("weight"), n, k)
        if scheme.bits == _PACKED_BITS:
            _check_int4_values(name, "weight", qw)
            qw = pack_int4(qw)
    _check_g_idx(name, group, get("weight_g_idx", required=False), scheme, k)
    wz = None if zero_points else get("weight_zero_point", required=False)
    if wz is not None and bool(wz.ne(0).any()):
        raise ValueError(f"tcgemm.compressed: '{name}.weight_zero_point' is not zero (weight zero points are not "
                         "supported)")
    # A static asymmetric layer reads its zero point below; anywhere else one must be zero.
    static_asymmetric = scheme.asymmetric and scheme.static
    iz = get("input_zero_point", required=static_asymmetric)
    if iz is not None and not static_asymmetric and bool(iz.ne(0).any()):
        raise ValueError(f"tcgemm.compressed: '{name}.input_zero_point' is not zero, but the config group's "
                         "activations are symmetric or dynamic")
    sw = get("weight_scale")
    # 4-bit scales per 64 or 32 inputs keep their dtype (fp32, bf16 or fp16: the layer reads them so); others fp32.
    if not (scheme.bits == _PACKED_BITS and scheme.weight == "group" and zp is None
            and sw.dtype in int4_scale_dtypes(k, scheme.weights.group_size)):
        sw = sw.float()
    if zero_points == "channel":  # one scale per channel: repeated over the groups, as the zero points
        if sw.numel() != n:
            raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' must be [{n}, 1], got {list(sw.shape)}")
        sw = sw.reshape(n, 1).expand(zp.shape)
    weight = scheme.weight
    layer_scheme = scheme.layer_scheme()
    if scheme.weights.per_block:
        expected = layer_scheme.weights.scale_shape(n, k)
        if tuple(sw.shape) != expected:
            size = scheme.weights.group_size
            what = f"{SCALE_BLOCK}x{SCALE_BLOCK} blocks" if weight == "block" else f"groups of {size}"
            raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' must be {list(expected)} for {what}, "
                             f"got {list(sw.shape)}")
        if scheme.bits == _PACKED_BITS and sw.numel() and not bool(((sw > 0) & sw.isfinite()).all()):
            bad = sw[~((sw > 0) & sw.isfinite())]
            raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' (the 4-bit weight's group scales) must hold "
                             f"finite values > 0, got {bad.numel()} others, e.g. {float(bad[0])}")
    elif weight == "tensor":
        if sw.numel() != 1:
            raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' must have one element, got {list(sw.shape)}")
        sw = sw.reshape(1).expand(n)
    elif sw.numel() != n:
        raise ValueError(f"tcgemm.compressed: '{name}.weight_scale' must be [{n}, 1], got {list(sw.shape)}")
    group_scale = None
    if scheme.bits == _PACKED_BITS and weight == "group" and zp is None and scheme.weights.group_size == SCALE_BLOCK:
        # two-level where they factor exactly
        two_level = dataclasses.replace(layer_scheme, weights=WeightArgs("channel", bits=_PACKED_BITS))
        factored = factor_group_scales(sw)
        if factored is not None and _runs(two_level):
            layer_scheme, (sw, group_scale) = two_level, factored
    layer = QuantLinear(k, n, bias=linear.bias is not None, device=device, scheme=layer_scheme)
    bias = get("bias", required=False)
    if (bias is None) != (linear.bias is None):
        raise ValueError(f"tcgemm.compressed: '{name}' has a bias in the "
                         f"{'model' if bias is None else 'checkpoint'} but not in the "
                         f"{'checkpoint' if bias is None else 'model'}")
    with torch.no_grad():
        layer.weight.copy_(qw)
        layer.weight_scale = layer.weight_scale.to(sw.dtype)
        layer.weight_scale.copy_(sw.reshape(layer.weight_scale.shape))
        if group_scale is not None:
            layer.weight_group_scale.copy_(group_scale)
        if zp is not None:
            layer.weight_zero_point.copy_(zp)
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


def _runs(scheme: QuantScheme) -> bool:
    """Whether a layer computes with ``scheme``."""
    try:
        scheme.check_layer()
    except SchemeError:
        return False
    return True


def _check_g_idx(name: str, group: str, g_idx: Optional[torch.Tensor], scheme: QuantScheme, k: int) -> None:
    """A ``weight_g_idx`` (GPTQ's activation ordering: the group of each input column) is fine when
    it says what the groups are anyway, k // group_size (all -1: unset); ValueError otherwise."""
    if g_idx is None or bool(g_idx.eq(-1).all()):
        return
    size = scheme.weights.group_size
    trivial = (scheme.weight == "group" and g_idx.numel() == k
               and torch.equal(g_idx.reshape(-1).long().cpu(), torch.arange(k) // size))
    if not trivial:
        raise ValueError(f"tcgemm.compressed: config group '{group}': '{name}.weight_g_idx' puts the weight's "
                         f"columns in groups other than k // {size} (activation ordering, actorder 'group'), "
                         "which tcgemm does not run")


def save_compressed(model: nn.Module, path: str, *, max_shard_size: Union[int, str] = "5GB") -> None:
    """Writes ``model`` as a compressed-tensors checkpoint: safetensors files (the quantized
    weights and their scales for every QuantLinear, every other tensor of the state dict as it is;
    ``model.safetensors``, or shards of at most ``max_shard_size`` with their
    ``model.safetensors.index.json``, as transformers' ``save_pretrained`` writes them)
    and the ``quantization_config`` of ``config.json`` (merged into an existing one, e.g. written
    by ``model.config.save_pretrained(path)``): one config group per scheme, targeting its layers
    by name, with its ``format``: int8 weights ``int-quantized``, 4-bit weights ``pack-quantized``
    (their groups of 128, 64 or 32, and zero points where they have them); the checkpoint's format
    is the groups' one, or
    ``mixed-precision`` where they differ.

    4-bit float group scales are written in the layer's dtype (per 64 or 32 inputs fp32, bf16 or
    fp16; else fp32). The format has no integer group scales: 4-bit layers with two-level scales
    (the preset "w4a8") are written with their float group scales ``weight_scale[:, None] *
    weight_group_scale`` (fp32, rounded once), so every reader dequantizes them as ``q * scale``
    per group, and :func:`load_compressed` factors them back into the same two-level scales
    (:func:`tcgemm.int4.factor_group_scales`; the quantizer's are that factoring). Layers with
    SmoothQuant multipliers (the multiplier belongs in the preceding op), tensor-parallel shards
    (:mod:`tcgemm.parallel`: save before sharding), or whose scheme read back
    as written would be one tcgemm does not run (two-level 4-bit weights with asymmetric
    activations), raise a ValueError. Layers stacked by :func:`tcgemm.fuse_siblings` are written
    apart and stacked again after the write."""
    from .fuse import siblings_apart
    with siblings_apart(model):
        out, qconfig = _compressed_state(model)
        write_sharded(out.items(), path, max_shard_size)
        del out
    config_path = os.path.join(path, _CONFIG)
    config: dict[str, Any] = {}
    if os.path.exists(config_path):
        with open(config_path) as f:
            config = json.load(f)
    config["quantization_config"] = qconfig
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def compressed_state(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """What :func:`save_compressed` writes: the checkpoint's tensors (tied ones once) and its
    ``quantization_config`` as a dict; ValueError for a layer the format cannot hold (see there).
    Layers stacked by :func:`tcgemm.fuse_siblings` come apart, as copies: while the state lives,
    they take the memory of the stacked layers again.

    Args:
        model: the model holding :class:`QuantLinear` layers.
    """
    from .fuse import siblings_apart
    with siblings_apart(model):  # layers stacked by tcgemm.fuse_siblings: written apart
        return _compressed_state(model)


def _compressed_state(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    QuantizationArgs, QuantizationConfig, QuantizationScheme, _ = _ct()
    state = {k: v for k, v in model.state_dict().items()}
    groups: dict[QuantScheme, list[str]] = {}
    for name, module in model.named_modules():
        if not isinstance(module, QuantLinear):
            continue
        if module.tensor_parallel is not None:
            tp = module.tensor_parallel
            raise ValueError(f"tcgemm.compressed: layer '{name}' is a {tp.style} tensor-parallel shard ({tp.rank} of "
                             f"{tp.world_size}); a checkpoint holds whole layers: save the model before sharding it")
        if module.smooth is not None:
            raise ValueError(f"tcgemm.compressed: layer '{name}' has SmoothQuant multipliers, which the "
                             "compressed-tensors format has no place for")
        if module.scheme.rotate:
            raise ValueError(f"tcgemm.compressed: layer '{name}' rotates its input (rotate=True), which the "
                             "compressed-tensors format has no place for")
        # The scheme a reader of the checkpoint finds (two-level 4-bit weights: float group scales).
        stated = QuantScheme.from_compressed_tensors(module.scheme.to_compressed_tensors())
        try:
            stated.layer_scheme()
        except SchemeError as e:
            raise ValueError(f"tcgemm.compressed: layer '{name}' ({module.scheme}) would read back from the "
                             f"checkpoint as {stated}: {e.what}") from None
        groups.setdefault(stated, []).append(name)
        prefix = f"{name}." if name else ""
        if stated.bits == _PACKED_BITS:
            scale = module.weight_scale
            if module.weight_group_scale is not None:
                scale = scale.reshape(-1, 1) * module.weight_group_scale.float()
            del state[prefix + "weight"]
            state.pop(prefix + "weight_group_scale", None)
            state[prefix + "weight_packed"] = _pack_checkpoint_int4(module.weight)
            state[prefix + "weight_shape"] = torch.tensor([module.out_features, module.in_features])
            state[prefix + "weight_scale"] = scale
            if module._buffers.get("weight_zero_point") is not None:  # packed along N, as compressed-tensors does
                state[prefix + "weight_zero_point"] = _pack_checkpoint_zero_points(module.weight_zero_point)
        elif module.weight_granularity == "channel":
            state[prefix + "weight_scale"] = module.weight_scale.reshape(-1, 1)
        if module.input_scale is not None:
            state[prefix + "input_scale"] = module.input_scale.reshape(1)
        if module.input_zero_point is not None:  # the format's int8 zero point
            state[prefix + "input_zero_point"] = module.input_zero_point.reshape(1).to(torch.int8)
    if not groups:
        raise ValueError("tcgemm.compressed: the model has no QuantLinear layers to save")
    config_groups = {}
    ordered = sorted(groups.items(),
                     key=lambda item: (-item[0].bits, item[0].weight, -item[0].weights.group_size,
                                       item[0].activation, item[0].asymmetric))
    for i, (scheme, names) in enumerate(ordered):
        config_groups[f"group_{i}"] = QuantizationScheme(
            targets=[f"re:^{re.escape(n)}$" for n in names],
            format=_PACKED if scheme.bits == _PACKED_BITS else _UNPACKED[0],
            **{role: QuantizationArgs(**args) for role, args in scheme.to_compressed_tensors().items()},
        )
    formats = {g.format for g in config_groups.values()}
    qconfig = QuantizationConfig(config_groups=config_groups, format=formats.pop() if len(formats) == 1 else _MIXED,
                                 quantization_status="compressed")
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
        out[k] = v  # moved to the CPU a shard at a time
    return out, qconfig.model_dump(mode="json")

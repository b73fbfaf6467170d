"""Tensor parallelism for :class:`tcgemm.QuantLinear` on ``torch.distributed``.

Two parallel styles for ``torch.distributed.tensor.parallel.parallelize_module``, with the layouts
of torch's own ``ColwiseParallel`` and ``RowwiseParallel``, so that a Llama block's plan reads as
in the torch tensor-parallel tutorial::

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    from tcgemm.parallel import ColwiseParallel, RowwiseParallel

    mesh = init_device_mesh("cuda", (2,))
    parallelize_module(block, mesh, {"mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                                     "mlp.down_proj": RowwiseParallel()})

A style applied to a :class:`~tcgemm.QuantLinear` shards it in place; applied to an
``nn.Linear`` it is torch's style of the same name, so one plan covers quantized and float layers.

* **Column-wise** (split along N, the output features): each rank keeps its rows of ``weight``,
  of the per-channel / per-group / per-block ``weight_scale``, of ``weight_group_scale`` (or
  ``weight_zero_point``) and of ``bias``. The input is replicated (a DTensor input is
  redistributed to ``Replicate()``); every rank quantizes the whole input as the unsharded layer does, so its output columns equal the
  unsharded layer's bit for bit. The output is the local shard ``[..., N / world]`` (a DTensor
  ``Shard(-1)`` with ``use_local_output=False``).
* **Row-wise** (split along K, the input features): each rank keeps its columns of ``weight``
  (of the packed bytes for 4-bit weights), of per-group / per-block scales, of
  ``weight_group_scale`` (or ``weight_zero_point``) and of ``smooth``. The input is the local slice ``[..., K / world]``
  (``input_layouts=Replicate()``: the full input, sliced here). Each rank quantizes its own
  slice (its own per-token scales), dequantizes in its own epilogue and the float partial
  outputs, in the input's dtype, are summed by one all-reduce; the bias is added once, on the
  first rank of the mesh. Never an int32 all-reduce, which would need equal activation scales.

Shards are even and aligned: N and K must divide by the world size, and every shard must hold
whole scale blocks of 128 where the layer has them (row-wise: per-group or per-block weights,
4-bit weights, whose groups of 64 or 32 then lie whole in a shard too, per-block activations, a
rotation; column-wise: per-block weights). Otherwise a ``ValueError`` names the layer and the sizes.

**State dict**: a sharded layer's ``state_dict`` holds plain tensors, its own shards (a rank
saves and loads its part). Loading a full, unsharded state dict into a sharded layer shards it
(a pre-hook slices every tensor of the unsharded shape), so a full checkpoint loads into a
sharded model, and :func:`tcgemm.compressed.load_compressed` into a model whose ``nn.Linear``
layers were sharded by torch's styles gives sharded :class:`~tcgemm.QuantLinear` layers.

**Shard then quantize**: :meth:`QuantLinear.from_linear` (and so :func:`tcgemm.quantize_model`)
on an ``nn.Linear`` whose weight is a DTensor (torch's ``ColwiseParallel``: ``Shard(0)``,
``RowwiseParallel``: ``Shard(1)``) quantizes the whole weight and keeps this rank's shard with
the matching tcgemm style, so the weights are the same as quantizing first and sharding after.
Static activations and SmoothQuant need the unsharded layer's calibration; quantize those before
sharding.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import torch
from torch import nn

from ._scales import SCALE_BLOCK
from .layer import QuantLinear


@dataclasses.dataclass(frozen=True)
class TensorParallelShard:
    """Where a sharded :class:`~tcgemm.QuantLinear` sits: ``layer.tensor_parallel``.

    Args:
        style: "colwise" or "rowwise".
        rank: this rank's position in the group (the mesh's local rank).
        world_size: the number of shards.
        full_in_features: the unsharded layer's in_features.
        full_out_features: the unsharded layer's out_features.
        name: the layer's name, for error messages.
    """

    style: str  # "colwise" or "rowwise"
    rank: int  # this rank's position in the group (the mesh's local rank)
    world_size: int
    full_in_features: int
    full_out_features: int
    name: str = ""  # the layer's name in error messages


def _name(layer_name: str) -> str:
    return f"'{layer_name}'" if layer_name else "QuantLinear"


def _needs_aligned_k(layer) -> list[str]:
    """Why a row-wise shard of ``layer`` must hold whole blocks of 128 input features."""
    reasons = []
    if layer.weight_granularity in ("group", "block"):
        reasons.append(f"its {layer.weight_granularity} weight scales")
    if layer.bits == 4:
        reasons.append("its 4-bit weight's groups")
    if layer.activation_granularity == "block":
        reasons.append("its per-block activation scales")
    if layer._rotate:
        reasons.append("its rotation")
    return reasons


def check_shardable(layer, style: str, world_size: int, name: str = "") -> None:
    """Raises a ValueError naming the layer and the sizes where ``world_size`` cannot split
    ``layer`` (a :class:`~tcgemm.QuantLinear`) with ``style`` ("colwise" or "rowwise").

    Args:
        layer: the unsharded :class:`~tcgemm.QuantLinear`.
        style: "colwise" (N must divide by ``world_size``; with 128x128 weight blocks, into
            multiples of 128) or "rowwise" (K must divide by ``world_size``; into multiples of 128
            where the layer has group or block weight scales, 4-bit weights, per-block activations
            or a rotation). Any other style raises ValueError.
        world_size: the number of shards, >= 1.
        name: the layer's name, for the messages.
    """
    if style not in ("colwise", "rowwise"):
        raise ValueError(f"tcgemm.parallel: style must be 'colwise' or 'rowwise', got {style!r}")
    if world_size < 1:
        raise ValueError(f"tcgemm.parallel: world_size must be positive, got {world_size}")
    n, k = layer.out_features, layer.in_features
    who = _name(name)
    if style == "colwise":
        if n % world_size:
            raise ValueError(f"tcgemm.parallel: {who} has out_features={n}, which {world_size} ranks cannot split "
                             "column-wise into equal shards")
        if layer.weight_granularity == "block" and (n // world_size) % SCALE_BLOCK:
            raise ValueError(f"tcgemm.parallel: {who} has out_features={n}: {world_size} column-wise shards of "
                             f"{n // world_size} would cut its {SCALE_BLOCK}x{SCALE_BLOCK} weight scale blocks "
                             f"(each shard must be a multiple of {SCALE_BLOCK})")
        return
    if k % world_size:
        raise ValueError(f"tcgemm.parallel: {who} has in_features={k}, which {world_size} ranks cannot split "
                         "row-wise into equal shards")
    local = k // world_size
    reasons = _needs_aligned_k(layer)
    if reasons and local % SCALE_BLOCK:
        raise ValueError(f"tcgemm.parallel: {who} has in_features={k}: {world_size} row-wise shards of {local} "
                         f"would cut the blocks of {SCALE_BLOCK} of {' and '.join(reasons)} (each shard must be a "
                         f"multiple of {SCALE_BLOCK})")


def _slices(info: TensorParallelShard) -> dict[str, Any]:
    """For each buffer, a function from the unsharded tensor to this rank's shard."""
    r, w = info.rank, info.world_size
    n, k = info.full_out_features, info.full_in_features

    def rows(per: int):
        return lambda t: t.narrow(0, r * per, per)

    def cols(per: int):
        return lambda t: t.narrow(1, r * per, per)

    if info.style == "colwise":
        nl = n // w
        return {"weight": rows(nl), "weight_group_scale": rows(nl), "weight_zero_point": rows(nl), "bias": rows(nl),
                "weight_scale": lambda t: (t.narrow(0, r * (nl // SCALE_BLOCK), nl // SCALE_BLOCK)
                                           if t.dim() == 2 and t.shape[0] != n else t.narrow(0, r * nl, nl))}
    kl = k // w
    kb = -(-kl // SCALE_BLOCK)
    # 2-D weight scales are per K block of 128 or (4-bit) per group of 64 or 32: a row-wise shard
    # holds whole blocks of 128 (check_shardable), so its share of the table's columns is 1 / w.
    return {"weight": lambda t: t.narrow(1, r * (t.shape[1] * kl // k), t.shape[1] * kl // k),
            "weight_group_scale": cols(kb), "weight_zero_point": cols(kb), "smooth": lambda t: t.narrow(0, r * kl, kl),
            "weight_scale": lambda t: t.narrow(1, r * (t.shape[1] // w), t.shape[1] // w) if t.dim() == 2 else t}


def _full_shapes(layer) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in layer._buffers.items() if t is not None}


def shard_quant_linear(layer, style: str, rank: int, world_size: int, name: str = ""):
    """Shards a :class:`~tcgemm.QuantLinear` in place for ``rank`` of ``world_size``: its
    buffers become this rank's shards (plain tensors) and ``in_features`` / ``out_features`` the
    local sizes; ``layer.tensor_parallel`` records where it sits. No communication is wired here
    (the styles add it); returns ``layer``.

    Args:
        layer: an unsharded :class:`~tcgemm.QuantLinear` (TypeError for anything else; ValueError
            if it is already sharded).
        style: "colwise" or "rowwise"; the sizes must split (:func:`check_shardable`, ValueError).
        rank: this rank, in [0, world_size) (ValueError otherwise).
        world_size: the number of shards.
        name: the layer's name, for error messages.
    """
    if not isinstance(layer, QuantLinear):
        raise TypeError(f"tcgemm.parallel: expected a QuantLinear, got {type(layer).__name__}")
    if getattr(layer, "tensor_parallel", None) is not None:
        raise ValueError(f"tcgemm.parallel: {_name(name)} is already sharded ({layer.tensor_parallel.style}, "
                         f"world size {layer.tensor_parallel.world_size})")
    check_shardable(layer, style, world_size, name)
    if not 0 <= rank < world_size:
        raise ValueError(f"tcgemm.parallel: rank must be in [0, {world_size}), got {rank}")
    info = TensorParallelShard(style, rank, world_size, layer.in_features, layer.out_features, name)
    full = _full_shapes(layer)
    slices = _slices(info)
    with torch.no_grad():
        for buf, cut in slices.items():
            t = layer._buffers.get(buf)
            if t is not None:
                layer._buffers[buf] = cut(t).contiguous().clone()
    if style == "colwise":
        layer.out_features //= world_size
    else:
        layer.in_features //= world_size
        layer._add_bias = rank == 0
    layer.refresh_weight_colsum()
    layer.tensor_parallel = info
    layer._tp_full_shapes = full
    handle = layer.register_load_state_dict_pre_hook(_shard_full_state)
    layer._load_state_dict_pre_hooks.move_to_end(handle.id, last=False)  # before the 4-bit shape check
    return layer


def _shard_full_state(module, state_dict, prefix, *args) -> None:
    """Slices the tensors of a full (unsharded) state dict to this rank's shards."""
    info = module.tensor_parallel
    slices = _slices(info)
    for buf, shape in module._tp_full_shapes.items():
        key = prefix + buf
        t = state_dict.get(key)
        cut = slices.get(buf)
        if t is None or cut is None or tuple(t.shape) != shape or module._buffers.get(buf) is None:
            continue
        if tuple(module._buffers[buf].shape) == shape:
            continue  # this buffer is not split (same shape either way)
        state_dict[key] = cut(t).contiguous().clone()  # not a view: load_state_dict(assign=True) keeps it


def _group(device_mesh):
    if device_mesh.ndim != 1:
        raise ValueError(f"tcgemm.parallel: the styles take a 1-D device mesh, got {device_mesh.ndim} dimensions")
    return device_mesh.get_group()


def _all_reduce_sum(y: torch.Tensor, group) -> torch.Tensor:
    import torch.distributed._functional_collectives as funcol

    out = funcol.all_reduce(y, "sum", group)
    return out.wait() if isinstance(out, funcol.AsyncCollectiveTensor) else out


def _to_local(x, device_mesh, placement):
    from torch.distributed.tensor import DTensor

    if isinstance(x, DTensor):
        return x.redistribute(device_mesh, [placement]).to_local()
    return x


def _torch_style(name: str, **kwargs):
    from torch.distributed.tensor import parallel as tp

    return getattr(tp, name)(**kwargs)


class _QuantStyle:
    """What the two styles share: the torch style for float layers, the keywords' checks."""

    _kind = ""
    _torch_name = ""

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output: bool = True) -> None:
        from torch.distributed.tensor import Replicate, Shard

        default_in, default_out = ((Replicate(), Shard(-1)) if self._kind == "colwise" else (Shard(-1), Replicate()))
        self.input_layouts = input_layouts or default_in
        self.output_layouts = output_layouts or default_out
        self.use_local_output = use_local_output
        self._kwargs = dict(input_layouts=input_layouts, output_layouts=output_layouts,
                            use_local_output=use_local_output)

    def check_layouts(self, name: str = "") -> None:
        """Raises a ValueError where a QuantLinear cannot take this style's layouts (an
        ``nn.Linear`` takes whatever torch's style does); ``name``, the layer's, goes into the
        message."""
        from torch.distributed.tensor import Replicate, Shard

        allowed_in = {"colwise": (Replicate(),), "rowwise": (Shard(-1), Replicate())}[self._kind]
        allowed_out = {"colwise": (Shard(-1), Replicate()), "rowwise": (Replicate(),)}[self._kind]
        where = f"tcgemm.parallel.{type(self).__name__}" + (f" for '{name}'" if name else "")
        if self.input_layouts not in allowed_in:
            raise ValueError(f"{where}: input_layouts must be one of {allowed_in} for a QuantLinear, got "
                             f"{self.input_layouts}")
        if self.output_layouts not in allowed_out:
            raise ValueError(f"{where}: output_layouts must be one of {allowed_out} for a QuantLinear, got "
                             f"{self.output_layouts}")

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        if not isinstance(module, QuantLinear):
            style = _torch_style(self._torch_name, **self._kwargs)
            style.src_data_rank = getattr(self, "src_data_rank", 0)
            return style._apply(module, device_mesh)
        self.check_layouts(getattr(module, "_tp_name", ""))
        group = _group(device_mesh)
        shard_quant_linear(module, self._kind, device_mesh.get_local_rank(), device_mesh.size(),
                           name=getattr(module, "_tp_name", ""))
        module.register_forward_pre_hook(self._input_hook(device_mesh))
        output_hook = self._output_hook(device_mesh, group)
        if output_hook is not None:
            module.register_forward_hook(output_hook)
        return module

    def _input_hook(self, device_mesh):
        raise NotImplementedError

    def _output_hook(self, device_mesh, group):
        raise NotImplementedError


def _parallel_style_base():
    from torch.distributed.tensor.parallel import ParallelStyle

    return ParallelStyle


class ColwiseParallel(_QuantStyle, _parallel_style_base()):
    """Column-wise sharding (split along the output features) of a QuantLinear; torch's
    ``ColwiseParallel`` for an ``nn.Linear``. Input ``Replicate()``; output ``Shard(-1)`` (the local
    shard, or a DTensor with ``use_local_output=False``) or ``Replicate()`` (all-gathered).

    Args:
        input_layouts: ``Replicate()`` (the default) for a QuantLinear.
        output_layouts: ``Shard(-1)`` (the default) or ``Replicate()`` for a QuantLinear.
        use_local_output: return a plain tensor (True) or a DTensor (False).

    Other layouts for a QuantLinear raise ValueError when the style is applied; an ``nn.Linear``
    takes whatever torch's style does.
    """

    _kind = "colwise"
    _torch_name = "ColwiseParallel"

    def _input_hook(self, device_mesh):
        from torch.distributed.tensor import Replicate

        def hook(module, args):
            return (_to_local(args[0], device_mesh, Replicate()),) + tuple(args[1:])

        return hook

    def _output_hook(self, device_mesh, group):
        from torch.distributed.tensor import DTensor, Replicate, Shard

        out_layout, local = self.output_layouts, self.use_local_output
        if out_layout == Shard(-1) and local:
            return None  # the local shard is the layer's own output

        def hook(module, args, y):
            d = DTensor.from_local(y, device_mesh, [Shard(y.dim() - 1)], run_check=False)
            if out_layout == Replicate():
                d = d.redistribute(device_mesh, [Replicate()])
            return d.to_local() if local else d

        return hook


class RowwiseParallel(_QuantStyle, _parallel_style_base()):
    """Row-wise sharding (split along the input features) of a QuantLinear; torch's
    ``RowwiseParallel`` for an ``nn.Linear``. Input ``Shard(-1)`` (the local slice) or
    ``Replicate()`` (the full input, sliced here); output ``Replicate()``: the ranks' float partial
    outputs summed by one all-reduce, the bias added once.

    Args:
        input_layouts: ``Shard(-1)`` (the default) or ``Replicate()`` for a QuantLinear.
        output_layouts: ``Replicate()`` (the default) for a QuantLinear.
        use_local_output: return a plain tensor (True) or a DTensor (False).

    Other layouts for a QuantLinear raise ValueError when the style is applied; an ``nn.Linear``
    takes whatever torch's style does. An input whose last dimension is not the one the input
    layout expects raises ValueError in forward.
    """

    _kind = "rowwise"
    _torch_name = "RowwiseParallel"

    def _input_hook(self, device_mesh):
        from torch.distributed.tensor import Replicate, Shard

        sliced = self.input_layouts == Replicate()

        def hook(module, args):
            x = args[0]
            info = module.tensor_parallel
            x = _to_local(x, device_mesh, Replicate() if sliced else Shard(x.dim() - 1))
            if not sliced and x.shape[-1] != module.in_features and x.shape[-1] == info.full_in_features:
                raise ValueError(f"tcgemm.parallel: {_name(info.name)} takes its slice of the input "
                                 f"(input_layouts=Shard(-1)), last dimension {module.in_features}; got the full "
                                 f"input {list(x.shape)} (input_layouts=Replicate() takes the full input)")
            if sliced:
                kl = module.in_features
                if x.shape[-1] != info.full_in_features:
                    raise ValueError(f"tcgemm.parallel: {_name(info.name)} takes the full input "
                                     f"(input_layouts=Replicate()), last dimension {info.full_in_features}; got "
                                     f"{list(x.shape)}")
                x = x.narrow(-1, info.rank * kl, kl)
            return (x,) + tuple(args[1:])

        return hook

    def _output_hook(self, device_mesh, group):
        from torch.distributed.tensor import DTensor, Replicate

        local = self.use_local_output

        def hook(module, args, y):
            y = _all_reduce_sum(y, group)
            return y if local else DTensor.from_local(y, device_mesh, [Replicate()], run_check=False)

        return hook


def style_of_placement(placement) -> Optional[str]:
    """The tcgemm style that keeps an ``nn.Linear`` weight's DTensor placement: ``Shard(0)`` is
    column-wise, ``Shard(1)`` row-wise; None for a replicated weight."""
    from torch.distributed.tensor import Shard

    if isinstance(placement, Shard):
        if placement.dim == 0:
            return "colwise"
        if placement.dim == 1:
            return "rowwise"
    return None


def torch_sharding(linear: nn.Module, name: str = "") -> Optional[tuple[str, Any, dict[str, Any]]]:
    """How torch's tensor-parallel styles sharded ``linear`` (DTensor weights): the tcgemm style
    that keeps its placement, the mesh, and the layouts the torch style was given
    (``input_layouts``, ``output_layouts``, ``use_local_output``, read from the hooks the style
    registered); None for a plain weight. Raises a ValueError naming the layer where the sharding
    cannot be carried over (a mesh of several dimensions, a replicated weight, hooks whose layouts
    cannot be read).

    Args:
        linear: the layer, possibly with a DTensor weight.
        name: its name, for the messages.
    """
    from torch.distributed.tensor import DTensor

    w = linear.weight
    if not isinstance(w, DTensor):
        return None
    who = _name(name)
    if len(w.placements) != 1:
        raise ValueError(f"tcgemm.parallel: {who} has a weight sharded over a {len(w.placements)}-D mesh; only 1-D "
                         "meshes are supported")
    style = style_of_placement(w.placements[0])
    if style is None:
        raise ValueError(f"tcgemm.parallel: {who} has a DTensor weight placed {w.placements[0]!r}; column-wise "
                         "(Shard(0)) or row-wise (Shard(1)) sharding is supported")
    layouts: dict[str, Any] = {}
    hooks = list(linear._forward_pre_hooks.values()) + list(linear._forward_hooks.values())
    for hook in hooks:
        for cell in getattr(hook, "__closure__", None) or ():
            fn = cell.cell_contents
            if not isinstance(fn, functools.partial):
                continue
            kind = getattr(fn.func, "__name__", "")
            if kind == "_prepare_input_fn" and len(fn.args) == 2:
                layouts["input_layouts"] = _one_placement(fn.args[0], who)
            elif kind == "_prepare_output_fn" and len(fn.args) == 2:
                layouts["output_layouts"] = _one_placement(fn.args[0], who)
                layouts["use_local_output"] = bool(fn.args[1])
    if hooks and len(layouts) != 3:
        raise ValueError(f"tcgemm.parallel: {who} has tensor-parallel hooks whose layouts tcgemm cannot read; "
                         "quantize the layer before sharding it, with tcgemm's styles")
    return style, w.device_mesh, layouts


def _one_placement(layouts, who: str):
    if isinstance(layouts, (tuple, list)):
        if len(layouts) != 1:
            raise ValueError(f"tcgemm.parallel: {who}: layouts {layouts} are not of a 1-D mesh")
        return layouts[0]
    return layouts


def full_linear(linear: nn.Linear, name: str = "") -> tuple[nn.Linear, Optional[tuple[str, Any, dict[str, Any]]]]:
    """An ``nn.Linear`` with plain (gathered) weight and bias when ``linear``'s are DTensors
    (torch's tensor-parallel styles), and :func:`torch_sharding`'s description to shard its
    quantized layer with; ``linear`` itself and None otherwise.

    Args:
        linear: the layer, possibly with DTensor weight and bias (gathered: a collective).
        name: its name, for error messages (:func:`torch_sharding`'s ValueError).
    """
    from torch.distributed.tensor import DTensor

    sharding = torch_sharding(linear, name)
    if sharding is None:
        return linear, None
    w = linear.weight
    full = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None,
                     device=w.device, dtype=w.dtype)
    with torch.no_grad():
        full.weight.copy_(w.full_tensor())
        if linear.bias is not None:
            b = linear.bias
            full.bias.copy_(b.full_tensor() if isinstance(b, DTensor) else b)
    return full, sharding


def adapt_sharded_linear(linear: nn.Linear, name: str = ""):
    """The :func:`tcgemm.layer.register_linear_adapter` plug-in for ``nn.Linear`` layers sharded
    by torch's tensor-parallel styles: None for a layer with plain weights; else the gathered
    layer to quantize, and a function that shards the quantized layer with tcgemm's style of the
    same placement and layouts (:func:`shard_like`).

    Args:
        linear: the float layer :meth:`tcgemm.QuantLinear.from_linear` was given.
        name: its name, for error messages.
    """
    full, sharding = full_linear(linear, name)
    if sharding is None:
        return None
    return full, lambda layer: shard_like(layer, *sharding, name=name)


def parallelize_module(module: nn.Module, device_mesh, parallelize_plan):
    """``torch.distributed.tensor.parallel.parallelize_module``, after naming every
    :class:`~tcgemm.QuantLinear` of ``module`` by its qualified name, so that a size a world size
    cannot split is reported with the layer's name.

    Args:
        module: the model (or block) to parallelize, in place.
        device_mesh: a 1-D ``DeviceMesh`` (tcgemm's styles raise ValueError for another).
        parallelize_plan: a style, or a dict from module names (fnmatch patterns) to styles, as
            for torch's ``parallelize_module``.

    Returns:
        ``module``, as torch's function returns it.
    """
    from torch.distributed.tensor.parallel import parallelize_module as torch_parallelize
    from .fuse import has_fused_siblings
    if has_fused_siblings(module):
        raise ValueError("tcgemm.parallel: the model holds layers stacked by tcgemm.fuse_siblings, which a plan "
                         "names apart; call tcgemm.unfuse_siblings(model) first (shards are not stacked)")
    for name, sub in module.named_modules():
        if isinstance(sub, QuantLinear):
            sub._tp_name = name
    return torch_parallelize(module, device_mesh, parallelize_plan)


def shard_like(layer, style: str, device_mesh, layouts: Optional[dict[str, Any]] = None, name: str = ""):
    """Shards a QuantLinear with tcgemm's style ``style`` over ``device_mesh``, with ``layouts``
    (keywords of the style; default layouts without).

    Args:
        layer: the unsharded :class:`~tcgemm.QuantLinear`; sharded in place and returned.
        style: "colwise" (:class:`ColwiseParallel`); anything else is :class:`RowwiseParallel`.
        device_mesh: a 1-D ``DeviceMesh``.
        layouts: keyword arguments of the style (``input_layouts``, ``output_layouts``,
            ``use_local_output``), or None.
        name: the layer's name, for error messages.
    """
    layer._tp_name = name
    (ColwiseParallel if style == "colwise" else RowwiseParallel)(**(layouts or {}))._apply(layer, device_mesh)
    return layer

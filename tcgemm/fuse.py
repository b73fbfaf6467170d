"""Sibling layers that read the same input, computed as one: a transformer's q, k and v
projections, its gate and up projections.

transformers' Llama-family models run ``q_proj``, ``k_proj`` and ``v_proj`` (and ``gate_proj`` and
``up_proj``) as separate layers on the same hidden states. Quantized, each of them quantizes that
input again and runs a GEMM of its own, and k and v (1024 outputs in Llama-3-8B) are too narrow to
fill a GPU. :func:`fuse_siblings` stacks such quantized layers along their outputs into one
:class:`tcgemm.QuantLinear` (every scheme keeps its scales per output row, so stacking changes
no row's numbers) and leaves in each layer's place a :class:`FusedSlice`: the first of the
siblings to be called with an input computes the stacked layer once, and every sibling returns
its columns of that output.

    tcgemm.quantize_model(model, scheme="w4a8")
    report = tcgemm.fuse_siblings(model)     # q/k/v and gate/up of every block, where they qualify
    print(report)
    ...                                       # inference, torch.compile, CUDA graphs
    tcgemm.unfuse_siblings(model)             # back to separate layers

The stacked output is reused only by the siblings of one call: an input object seen again (and,
outside ``torch.compile``, not modified in place since: its version counter) with siblings of
that call still to come. Checkpoints hold separate layers: :func:`tcgemm.compressed.save_compressed`
(and ``save_pretrained`` through :mod:`tcgemm.hf`) writes a fused model's layers apart
(:func:`siblings_apart`); :func:`unfuse_siblings` splits them back for good, bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from typing import Iterable, Iterator, Optional, Sequence

import torch
from torch import nn

from .layer import QuantLinear

__all__ = ["SIBLINGS", "FuseReport", "FusedSiblings", "FusedSlice", "fuse_siblings", "unfuse_siblings",
           "siblings_apart", "has_fused_siblings"]

# The names of sibling layers that read the same input, as transformers' Llama, Mistral, Qwen and
# Gemma models name them (attention's projections of the hidden states; the gated MLP's two).
SIBLINGS: tuple[tuple[str, ...], ...] = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))

# Buffers stacked along the outputs (dim 0), where a layer has them; those of the input
# (input_scale, input_zero_point, smooth) must be equal and are taken once.
_STACKED = ("weight", "weight_scale", "weight_group_scale", "weight_zero_point", "weight_colsum")
_SHARED_INPUT = ("input_scale", "input_zero_point", "smooth")


@dataclasses.dataclass
class FuseReport:
    """What :func:`fuse_siblings` did: ``fused``, the groups stacked (``"block.{q_proj,k_proj,v_proj}"``),
    and ``skipped``, (group, reason) for each group of sibling names found but not stacked."""

    fused: list[str] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"fused {len(self.fused)} groups of sibling layers, skipped {len(self.skipped)}"]
        lines += [f"  skipped {group}: {reason}" for group, reason in self.skipped]
        return "\n".join(lines)


class FusedSiblings(nn.Module):
    """The stacked layer of a group of siblings (``layer``, a :class:`tcgemm.QuantLinear` whose
    output columns ``bounds[i]:bounds[i + 1]`` are sibling ``names[i]``'s), held by their parent
    module; each sibling's :class:`FusedSlice` asks it for its columns.

    Args:
        layer: the stacked layer.
        names: the siblings' attribute names on their parent.
        out_features: each sibling's output size, in order.
        has_bias: whether each sibling had a bias (the stacked one holds zeros for those that did
            not), so that :func:`unfuse_siblings` gives each its own back.
    """

    def __init__(self, layer: QuantLinear, names: Sequence[str], out_features: Sequence[int],
                 has_bias: Sequence[bool]) -> None:
        super().__init__()
        self.layer = layer
        self.names = tuple(names)
        self.bounds = tuple(itertools.accumulate(out_features, initial=0))
        self.has_bias = tuple(bool(b) for b in has_bias)
        self._clear()

    def _clear(self) -> None:
        self._input: Optional[torch.Tensor] = None
        self._version: Optional[int] = None
        self._output: Optional[torch.Tensor] = None
        self._pending: tuple[bool, ...] = ()

    def columns(self, x: torch.Tensor, index: int) -> torch.Tensor:
        """Sibling ``index``'s output for ``x``: its columns of the stacked layer's output,
        computed here unless the same ``x`` has already been through it for a sibling of this
        call that is still to come (its slice not yet taken)."""
        compiling = torch.compiler.is_compiling()
        reuse = (self._input is x and index < len(self._pending) and self._pending[index]
                 and (compiling or self._version == x._version))
        if not reuse:
            self._input, self._output = x, self.layer(x)
            self._version = None if compiling else x._version
            self._pending = (True,) * len(self.names)
        out = self._output
        self._pending = tuple(p and i != index for i, p in enumerate(self._pending))
        if not any(self._pending):  # every sibling has its columns: nothing is kept past the call
            self._clear()
        return out[..., self.bounds[index]:self.bounds[index + 1]]

    def extra_repr(self) -> str:
        """The siblings and their columns."""
        return ", ".join(f"{n}=[{a}:{b}]" for n, a, b in zip(self.names, self.bounds, self.bounds[1:]))


class FusedSlice(nn.Module):
    """What stands in a fused sibling's place: ``forward(x)`` is its columns of the stacked layer
    (:meth:`FusedSiblings.columns`). It holds no tensors: the stacked layer belongs to the parent.

    Args:
        siblings: the group's :class:`FusedSiblings`.
        index: this sibling's place in the group.
    """

    def __init__(self, siblings: FusedSiblings, index: int) -> None:
        super().__init__()
        object.__setattr__(self, "siblings", siblings)  # not a submodule: the parent holds it once
        self.index = index
        self.in_features = siblings.layer.in_features
        self.out_features = siblings.bounds[index + 1] - siblings.bounds[index]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` [..., in_features] -> [..., out_features], a view of the stacked output."""
        return self.siblings.columns(x, self.index)

    def extra_repr(self) -> str:
        """The sibling's sizes and place."""
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"of={self.siblings.names}[{self.index}]")


def _why_not(layers: list[nn.Module]) -> Optional[str]:
    """Why these layers cannot be stacked, or None."""
    if not all(type(layer) is QuantLinear for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers})
        return f"not all tcgemm.QuantLinear (found {', '.join(kinds)})"
    first = layers[0]
    if len({id(layer) for layer in layers}) < len(layers):
        return "one layer under two of the names"
    if any(layer.tensor_parallel is not None for layer in layers):
        return "tensor-parallel shards"
    if any(layer.scheme != first.scheme for layer in layers):
        return "different schemes: " + ", ".join(str(layer.scheme) for layer in layers)
    if any(layer.in_features != first.in_features for layer in layers):
        return "different in_features: " + ", ".join(str(layer.in_features) for layer in layers)
    for name, buffer in first._buffers.items():
        tensors = [layer._buffers.get(name) for layer in layers]
        if any((t is None) != (buffer is None) for t in tensors) and name != "bias":
            return f"'{name}' present in some only"
        if buffer is None:
            continue
        if any(t.device != buffer.device or t.dtype != buffer.dtype for t in tensors if t is not None):
            return f"'{name}' on different devices or of different dtypes"
    if any(isinstance(layer.bias, nn.Parameter) and layer.bias.requires_grad for layer in layers):
        return "a trainable bias"
    for name in _SHARED_INPUT:
        tensors = [layer._buffers.get(name) for layer in layers]
        if tensors[0] is not None and not all(torch.equal(t, tensors[0]) for t in tensors[1:]):
            return f"different '{name}' (the input is quantized once for all)"
    if first.weight_granularity == "block" and any(layer.out_features % 128 for layer in layers[:-1]):
        return "128x128 weight blocks and an out_features not a multiple of 128 before the last layer"
    return None


def _stack(layers: list[QuantLinear]) -> QuantLinear:
    """One layer whose output is the layers' outputs side by side."""
    first = layers[0]
    has_bias = [layer.bias is not None for layer in layers]
    stacked = QuantLinear(first.in_features, sum(layer.out_features for layer in layers), bias=any(has_bias),
                          scheme=first.scheme, device="meta")
    for name in set(stacked._buffers) | set(first._buffers):
        t = first._buffers.get(name)
        if name == "bias" and any(has_bias):
            t = torch.cat([layer.bias.detach() if layer.bias is not None else
                           torch.zeros(layer.out_features, dtype=torch.float32, device=first.weight.device)
                           for layer in layers])
        elif t is not None and name in _STACKED:
            t = torch.cat([layer._buffers[name].detach() for layer in layers])
        elif t is not None:
            t = t.detach().clone()
        stacked._buffers[name] = t
    return stacked


def _split(fused: FusedSiblings) -> list[QuantLinear]:
    """The siblings back as separate layers (copies of their rows of the stacked buffers)."""
    stacked, layers = fused.layer, []
    for i, (a, b) in enumerate(zip(fused.bounds, fused.bounds[1:])):
        layer = QuantLinear(stacked.in_features, b - a, bias=fused.has_bias[i], scheme=stacked.scheme, device="meta")
        for name in set(layer._buffers) | set(stacked._buffers):
            t = stacked._buffers.get(name)
            if t is not None and name == "weight_scale" and stacked.weight_granularity == "block":
                t = t.detach()[a // 128:-(-b // 128)].clone()  # rows of 128x128 blocks
            elif t is not None and (name in _STACKED or name == "bias"):
                t = t.detach()[a:b].clone() if name != "bias" or fused.has_bias[i] else None
            elif t is not None:
                t = t.detach().clone()
            layer._buffers[name] = t
        layers.append(layer)
    return layers


def fuse_siblings(model: nn.Module, siblings: Iterable[Sequence[str]] = SIBLINGS) -> FuseReport:
    """Stacks each group of sibling :class:`tcgemm.QuantLinear` layers of ``model`` (children of
    one module, named as a group of ``siblings``) into one layer, in place; see the module's text.
    A group qualifies when its layers share the scheme, in_features, device and dtypes, and every
    input-side buffer (static input scale and zero point, SmoothQuant multipliers); groups found
    but not stacked are reported with the reason.

    Args:
        model: a model quantized with :func:`tcgemm.quantize_model` (or holding QuantLinear
            layers), for inference.
        siblings: the groups of child names to stack (default :data:`SIBLINGS`); all of a group's
            names must be present.

    Returns:
        a :class:`FuseReport`.

    Example:
        >>> tcgemm.quantize_model(model, scheme="w4a8")
        >>> print(tcgemm.fuse_siblings(model))
    """
    groups = [tuple(group) for group in siblings]
    if any(len(group) < 2 or len(set(group)) != len(group) for group in groups):
        raise ValueError(f"fuse_siblings: argument 'siblings' must hold groups of two or more distinct names, got "
                         f"{groups}")
    report = FuseReport()
    for prefix, parent in list(model.named_modules()):
        for group in groups:
            if not all(isinstance(parent._modules.get(name), nn.Module) for name in group):
                continue
            where = f"{prefix}.{{{','.join(group)}}}" if prefix else f"{{{','.join(group)}}}"
            reason = _fuse_group(parent, group)
            if reason is None:
                report.fused.append(where)
            else:
                report.skipped.append((where, reason))
    return report


def _fuse_group(parent: nn.Module, group: tuple[str, ...]) -> Optional[str]:
    """Stacks parent's children `group` (all present) unless they cannot be: then the reason."""
    layers = [parent._modules[name] for name in group]
    reason = _why_not(layers)
    if reason is None:
        fused = FusedSiblings(_stack(layers), group, [layer.out_features for layer in layers],
                              [layer.bias is not None for layer in layers])
        parent.add_module("fused_" + "_".join(group), fused)
        for i, name in enumerate(group):
            setattr(parent, name, FusedSlice(fused, i))
    return reason


def unfuse_siblings(model: nn.Module) -> int:
    """Undoes :func:`fuse_siblings` in place: each group's layers back as separate
    :class:`tcgemm.QuantLinear` layers, bit for bit those that were stacked.

    Args:
        model: the model :func:`fuse_siblings` changed.

    Returns:
        the number of groups split.
    """
    count = 0
    for _, parent in list(model.named_modules()):
        for child_name, child in list(parent._modules.items()):
            if isinstance(child, FusedSiblings):
                for name, layer in zip(child.names, _split(child)):
                    setattr(parent, name, layer)
                del parent._modules[child_name]
                count += 1
    return count


@contextlib.contextmanager
def siblings_apart(model: nn.Module) -> Iterator[None]:
    """The model's stacked groups as separate layers for the ``with`` block (e.g. while a
    checkpoint is written: it holds the layers apart), then as they were. The stacked layers are
    left untouched (a CUDA graph that reads them stays valid); the separate layers are copies,
    which take the stacked layers' memory again for the block.

    Args:
        model: a model :func:`fuse_siblings` may have changed.
    """
    swaps = []  # (parent, the group's child name, its FusedSiblings, its slices)
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):
            if isinstance(child, FusedSiblings):
                slices = {name: parent._modules[name] for name in child.names}
                for name, layer in zip(child.names, _split(child)):
                    parent._modules[name] = layer
                del parent._modules[child_name]
                swaps.append((parent, child_name, child, slices))
    try:
        yield
    finally:
        for parent, child_name, child, slices in swaps:
            parent._modules.update(slices)
            parent._modules[child_name] = child


def has_fused_siblings(model: nn.Module) -> bool:
    """Whether ``model`` holds layers stacked by :func:`fuse_siblings`.

    Args:
        model: any module.
    """
    return any(isinstance(m, (FusedSiblings, FusedSlice)) for m in model.modules())

"""safetensors checkpoints as transformers lays them out: one ``model.safetensors``, or shards
``model-00001-of-00004.safetensors`` ... with ``model.safetensors.index.json`` mapping each tensor
to its shard. Read tensor by tensor (``safe_open``: nothing is read before it is asked for), and
written in shards of a given size.

    reader = tcgemm.checkpoint.Reader("path/to/checkpoint")
    w = reader.load("model.layers.0.mlp.up_proj.weight_packed", device="cuda")
    tcgemm.checkpoint.write_sharded(tensors, "path/to/output", max_shard_size="5GB")
"""

from __future__ import annotations

import json
import os
import re
from typing import Iterable, Optional, Union

import torch
from torch import nn

__all__ = ["INDEX", "WEIGHTS", "Reader", "load_state", "parents", "parse_size", "write_sharded"]

WEIGHTS = "model.safetensors"
INDEX = WEIGHTS + ".index.json"
_SHARD = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20,
          "GIB": 2**30, "TIB": 2**40}


def parse_size(size: Union[int, str]) -> int:
    """Bytes of ``size``: an int, or a string such as ``"5GB"`` (10^9 bytes each, as transformers
    counts them) or ``"500MiB"`` (2^20).

    Args:
        size: an int > 0, or a number followed by B, KB, MB, GB, TB, KiB, MiB, GiB or TiB.

    Raises:
        ValueError: anything else.
    """
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    else:
        match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(size))
        unit = match.group(2).upper() if match else None
        if unit not in _UNITS:
            raise ValueError(f"tcgemm.checkpoint: max_shard_size must be an int or a size such as '5GB' or '500MiB', "
                             f"got {size!r}")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"tcgemm.checkpoint: max_shard_size must be > 0 bytes, got {size!r}")
    return value


class Reader:
    """The tensors of a checkpoint folder, read one at a time.

    The files are those its ``model.safetensors.index.json`` names, or else every ``*.safetensors``
    file of the folder. Only the headers are read on construction; :meth:`load` reads one tensor
    (memory-mapped), so holding a reader costs nothing.

    Args:
        path: the folder.

    Raises:
        ValueError: no safetensors file, an index naming a file that is missing, or a tensor name
            held by two files.
    """

    def __init__(self, path: str) -> None:
        from safetensors import safe_open

        self.path = path
        self._file_of: dict[str, str] = {}
        index = os.path.join(path, INDEX)
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f).get("weight_map") or {}
            for name, file in weight_map.items():
                if not os.path.exists(os.path.join(path, file)):
                    raise ValueError(f"tcgemm.checkpoint: {index} names '{file}' (for '{name}'), which is missing")
            self._file_of = dict(weight_map)
            return
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
        if not files:
            raise ValueError(f"tcgemm.checkpoint: no .safetensors files in {path}")
        for file in files:
            with safe_open(os.path.join(path, file), framework="pt") as f:
                for name in f.keys():
                    if name in self._file_of:
                        raise ValueError(f"tcgemm.checkpoint: '{name}' is in both {self._file_of[name]} and {file}")
                    self._file_of[name] = file

    def keys(self) -> list[str]:
        """Every tensor name of the checkpoint."""
        return list(self._file_of)

    def __contains__(self, name: object) -> bool:
        return name in self._file_of

    def __len__(self) -> int:
        return len(self._file_of)

    def dtype(self, name: str) -> torch.dtype:
        """The dtype of tensor ``name``, read from its file's header.

        Args:
            name: a tensor of the checkpoint.
        """
        from safetensors import safe_open

        with safe_open(os.path.join(self.path, self._file_of[name]), framework="pt") as f:
            return _DTYPES[f.get_slice(name).get_dtype()]

    def load(self, name: str, device: Optional[Union[str, torch.device]] = None) -> torch.Tensor:
        """Tensor ``name``, read from its file onto ``device`` (default: the CPU).

        Args:
            name: a tensor of the checkpoint (KeyError otherwise).
            device: where it goes.
        """
        from safetensors import safe_open

        file = self._file_of[name]
        target = torch.device("cpu" if device is None else device)
        with safe_open(os.path.join(self.path, file), framework="pt", device="cpu") as f:
            t = f.get_tensor(name)
        return t if target.type == "cpu" else t.to(target)


# safetensors' header dtype names.
_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


def write_sharded(tensors: Iterable[tuple[str, torch.Tensor]], path: str, max_shard_size: Union[int, str] = "5GB",
                  metadata: Optional[dict[str, str]] = None) -> list[str]:
    """Writes ``(name, tensor)`` pairs into ``path`` as transformers' ``save_pretrained`` does: one
    ``model.safetensors`` when they fit in one shard, else ``model-0000i-of-0000n.safetensors``
    files of at most ``max_shard_size`` bytes each (a tensor larger than that gets a shard of its
    own) and ``model.safetensors.index.json`` (``metadata.total_size`` and the ``weight_map``).
    Shard files and an index left in ``path`` by an earlier save are removed first. Tensors go to
    the CPU one shard at a time.

    Args:
        tensors: the pairs, in the order they are written; names must be unique.
        path: the folder (created if missing).
        max_shard_size: bytes per shard, an int or a string such as ``"5GB"`` (:func:`parse_size`).
        metadata: string metadata written into every file's header (``{"format": "pt"}`` is added).

    Returns:
        the files written, in order.
    """
    from safetensors.torch import save_file

    limit = parse_size(max_shard_size)
    shards: list[list[tuple[str, torch.Tensor]]] = [[]]
    size = 0
    seen: set[str] = set()
    total = 0
    for name, t in tensors:
        if name in seen:
            raise ValueError(f"tcgemm.checkpoint: tensor name '{name}' given twice")
        seen.add(name)
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append((name, t))
        size += nbytes
        total += nbytes
    os.makedirs(path, exist_ok=True)
    for stale in os.listdir(path):
        if stale in (WEIGHTS, INDEX) or _SHARD.match(stale):
            os.remove(os.path.join(path, stale))
    header = {"format": "pt", **(metadata or {})}
    if len(shards) == 1:
        names = [WEIGHTS]
    else:
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map = {}
    for file, shard in zip(names, shards):
        save_file({name: t.detach().contiguous().cpu() for name, t in shard}, os.path.join(path, file),
                  metadata=header)
        weight_map.update({name: file for name, _ in shard})
    if len(shards) > 1:
        with open(os.path.join(path, INDEX), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    return names


def parents(model: nn.Module) -> dict[int, list[tuple[nn.Module, str]]]:
    """Every (parent, attribute) slot holding each module of ``model``, by the module's id (a
    shared module has several): where to put a replacement so that every reference sees it.

    Args:
        model: the root module (not itself listed: it has no parent).
    """
    slots: dict[int, list[tuple[nn.Module, str]]] = {}
    for parent in model.modules():
        for child_name, child in parent._modules.items():
            if child is not None:
                slots.setdefault(id(child), []).append((parent, child_name))
    return slots


def load_state(model: nn.Module, tensors: Reader, device=None, *, skip: Iterable[str] = (),
               owned: Iterable[str] = (), where: str = "tcgemm.checkpoint") -> list[str]:
    """Loads a checkpoint's tensors into ``model``'s parameters and persistent buffers, one at a
    time: each is copied into the model's tensor, or, where that is on the meta device, put on
    ``device`` in its place (in every slot sharing it, in the model's dtype). Then ties weights
    (transformers' ``tie_weights``), builds again the modules whose buffers are computed rather
    than saved (see below), and refuses what is still missing or on the meta device.

    A module without parameters whose buffers are on the meta device and that has a ``config``
    (transformers' rotary embeddings: ``inv_freq`` is computed in the constructor, never saved)
    is built again on ``device`` as ``type(module)(module.config)``.

    Args:
        model: the model, in place.
        tensors: the checkpoint (a :class:`Reader`).
        device: where tensors replacing meta ones go; needed when the model has any.
        skip: names of the checkpoint to leave alone (already taken by the caller).
        owned: qualified module names whose tensors the caller has filled (not "missing").
        where: what the error messages start with.

    Returns:
        the checkpoint's names (outside ``skip``) that no tensor of the model took.

    Raises:
        ValueError: a shape that differs, a tensor the checkpoint lacks, one left on the meta
            device, or meta tensors without ``device``.
    """
    skip, quantized = set(skip), set(owned)
    slots: dict[str, tuple[int, torch.Tensor]] = {}
    holders: dict[int, list[tuple[nn.Module, str, bool]]] = {}  # id(tensor) -> (module, attribute, is a parameter)
    for prefix, module in model.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for attr, t in module._parameters.items():
            if t is not None:
                slots[dot + attr] = t
                holders.setdefault(id(t), []).append((module, attr, True))
        for attr, t in module._buffers.items():
            if t is not None and attr not in module._non_persistent_buffers_set:
                slots[dot + attr] = t
                holders.setdefault(id(t), []).append((module, attr, False))
    unexpected, loaded, done = [], set(), []
    for key in tensors.keys():
        current = slots.get(key)
        if key in skip:
            continue
        if current is None:
            unexpected.append(key)
            continue
        if id(current) in loaded:
            continue
        target = current.device if not current.is_meta else device
        if target is None or torch.device(target).type == "meta":
            raise ValueError(f"{where}: '{key}' of the model is on the meta device; pass device= "
                             "(where the loaded model goes)")
        value = tensors.load(key, target)
        if value.shape != current.shape:
            raise ValueError(f"{where}: '{key}' is {list(value.shape)} in the checkpoint but "
                             f"{list(current.shape)} in the model")
        with torch.no_grad():
            if current.is_meta:
                value = value.to(current.dtype)
                new = nn.Parameter(value, requires_grad=current.requires_grad) if isinstance(
                    current, nn.Parameter) else value
                for module, attr, is_param in holders[id(current)]:
                    (module._parameters if is_param else module._buffers)[attr] = new
                current = new
            else:
                current.copy_(value)
        loaded.add(id(current))
        done.append(current)
    if hasattr(model, "tie_weights"):  # transformers: a tied lm_head is left out of checkpoints
        model.tie_weights()
    _rebuild_meta_buffers(model, device)
    loaded_storage = {t.data_ptr() for t in done}
    missing = [k for k, t in model.state_dict().items()
               if k not in tensors and not any(k.startswith(n + ".") for n in quantized)
               and (t.is_meta or t.data_ptr() not in loaded_storage)]
    if missing:
        raise ValueError(f"{where}: the checkpoint lacks {len(missing)} tensors of the model, "
                         f"e.g. {missing[:3]}")
    meta = [f"{p}.{n}" if p else n for p, m in model.named_modules() for n, t in
            list(m._parameters.items()) + list(m._buffers.items()) if t is not None and t.is_meta]
    if meta:
        raise ValueError(f"{where}: {len(meta)} tensors of the model are still on the meta device after "
                         f"loading (neither the checkpoint nor the model's config gives them), e.g. {meta[:3]}")
    return sorted(unexpected)


def _rebuild_meta_buffers(model: nn.Module, device) -> None:
    """Modules without parameters whose buffers are on the meta device and that are built from a
    config (transformers' rotary embeddings: inv_freq is computed, never saved) are built again
    on ``device``."""
    slots = parents(model)
    for module in list(model.modules()):
        if (device is None or module._parameters or not hasattr(module, "config")
                or not any(t is not None and t.is_meta for t in module._buffers.values())):
            continue
        with torch.device(device):
            fresh = type(module)(module.config)
        for parent, child_name in slots.get(id(module), []):
            setattr(parent, child_name, fresh)

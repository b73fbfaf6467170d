"""How compressed-tensors lays out integer weights, and tcgemm's reading of them
(:mod:`tcgemm.compressed`): 4-bit values packed eight to an int32 (``pack-quantized``), and the
weight zero points of asymmetric 4-bit weights."""

from __future__ import annotations

import sys
from typing import Optional

import torch

from ._scales import SCALE_BLOCK
from .int4 import INT4_MAX, INT4_MIN, pack_int4

# The format of 4-bit weights packed eight to an int32 (compressed-tensors' pack_to_int32), and
# the bits tcgemm reads in it.
PACKED = "pack-quantized"
PACKED_BITS = 4


def unpack_checkpoint_int4(name: str, packed: torch.Tensor, shape: Optional[torch.Tensor], n: int,
                            k: int) -> torch.Tensor:
    """tcgemm's packed uint8 [N, K/2] of a pack-quantized 4-bit weight: int32 [N, ceil(K/8)] words
    holding ``q + 8`` with value i of a word at bits 4i (the last word zero-padded)."""
    words = -(-k // 8)
    if packed.dtype != torch.int32 or tuple(packed.shape) != (n, words):
        raise ValueError(f"tcgemm.compressed: '{name}.weight_packed' must be int32 [{n}, {words}] (4-bit values "
                         f"packed eight to a word), got {packed.dtype} {list(packed.shape)}")
    if shape is not None and shape.tolist() != [n, k]:
        raise ValueError(f"tcgemm.compressed: '{name}.weight_shape' is {shape.tolist()}, but the layer is [{n}, {k}]")
    data = packed.contiguous().view(torch.uint8)  # value i of a word in byte i // 2, low nibble first...
    if sys.byteorder == "big":  # ...counting the word's bytes from its least significant one
        data = data.view(n, words, 4).flip(-1).reshape(n, 4 * words)
    # Offset binary (q + 8) to two's complement: flip the top bit of each nibble.
    return data[:, : k // 2] ^ 0x88


def pack_checkpoint_int4(packed: torch.Tensor) -> torch.Tensor:
    """The pack-quantized ``weight_packed`` int32 [N, ceil(K/8)] of tcgemm's packed uint8 [N, K/2]
    (the inverse of :func:`unpack_checkpoint_int4`; padding bytes 0, as ``pack_to_int32``'s)."""
    n, half = packed.shape
    words = -(-half // 4)
    data = torch.zeros(n, 4 * words, dtype=torch.uint8, device=packed.device)
    data[:, :half] = packed ^ 0x88
    if sys.byteorder == "big":
        data = data.view(n, words, 4).flip(-1).reshape(n, 4 * words)
    return data.view(torch.int32)


def int8_weight(name: str, q: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """``q``, the integers of weight ``name`` one to an int8 (int-quantized), if it is int8 [N, K];
    else ValueError."""
    if q.dtype != torch.int8 or tuple(q.shape) != (n, k):
        raise ValueError(f"tcgemm.compressed: '{name}.weight' must be int8 [{n}, {k}], got {q.dtype} "
                         f"{list(q.shape)} (is the checkpoint int-quantized?)")
    return q


def check_int4_values(name: str, what: str, t: torch.Tensor) -> None:
    """ValueError unless the integers of tensor ``name.what`` lie in the 4-bit range [-8, 7]."""
    lo, hi = (int(t.min()), int(t.max())) if t.numel() else (0, 0)
    if lo < INT4_MIN or hi > INT4_MAX:
        raise ValueError(f"tcgemm.compressed: '{name}.{what}' holds values in [{lo}, {hi}], outside the "
                         f"[{INT4_MIN}, {INT4_MAX}] of the config group's 4-bit weights")


def asymmetric_4bit_tables(name: str, strategy: str, fmt: str, get, n: int, k: int
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """An asymmetric 4-bit weight as tcgemm holds it: the packed uint8 [N, K/2] of q in [-8, 7]
    (packed eight to an int32, or one to an int8, in the checkpoint) and its int8 zero points [N,
    ceil(K/128)] in [-8, 7] (``strategy`` "group": one per group of 128; "channel": one per
    channel, repeated over the groups), read packed eight to an int32 along N, as compressed-tensors
    packs them, or one to an int8."""
    if fmt == PACKED:
        packed = unpack_checkpoint_int4(name, get("weight_packed"), get("weight_shape", required=False), n, k)
    else:
        q = int8_weight(name, get("weight"), n, k)
        check_int4_values(name, "weight", q)
        packed = pack_int4(q)
    groups = -(-k // SCALE_BLOCK) if strategy == "group" else 1
    zp = get("weight_zero_point")
    if zp.dtype == torch.int32 and tuple(zp.shape) == (-(-n // 8), groups):
        zp = unpack_checkpoint_zero_points(zp, n)
    elif zp.dtype != torch.int8 or zp.numel() != n * groups:
        raise ValueError(f"tcgemm.compressed: '{name}.weight_zero_point' must be int32 [{-(-n // 8)}, {groups}] "
                         f"(packed eight to a word along the output channels) or int8 [{n}, {groups}], got "
                         f"{zp.dtype} {list(zp.shape)}")
    zp = zp.reshape(n, groups)
    check_int4_values(name, "weight_zero_point", zp)
    return packed, zp.expand(n, -(-k // SCALE_BLOCK)).contiguous() if groups == 1 else zp


def unpack_checkpoint_zero_points(words: torch.Tensor, n: int) -> torch.Tensor:
    """The int8 [N, G] zero points of compressed-tensors' int32 [ceil(N/8), G]: ``z + 8`` of row
    8j + i at bits 4i of word j (pack_to_int32 along dim 0)."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=words.device)
    nibbles = (words.unsqueeze(1) >> shifts.view(1, 8, 1)) & 0xF  # [words, 8, G]
    return (nibbles.reshape(-1, words.shape[1])[:n] - 8).to(torch.int8)


def pack_checkpoint_zero_points(zp: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' int32 [ceil(N/8), G] of int8 zero points [N, G] in [-8, 7] (the inverse
    of :func:`unpack_checkpoint_zero_points`; padding rows 0, as ``pack_to_int32``'s)."""
    n, g = zp.shape
    words = -(-n // 8)
    nibbles = torch.zeros(words * 8, g, dtype=torch.int64, device=zp.device)
    nibbles[:n] = zp.to(torch.int64) + 8
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=zp.device)
    value = (nibbles.view(words, 8, g) << shifts.view(1, 8, 1)).sum(dim=1)
    return torch.where(value >= 2**31, value - 2**32, value).to(torch.int32)

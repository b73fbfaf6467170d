"""Scales of the scaled GEMM in Python: the one block size and the one decoder of scale shapes.

The fake of ``scaled_gemm``, the float64 reference and ``QuantLinear`` read scale shapes through
this module; the C++ binding layer has its own decoder (``csrc/common/scale_layout.h``) and the two
resolve shapes in the same order. Shapes may hold symbolic sizes (torch.compile, opcheck).
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

import torch

# K (and, for 128x128 weight scales, N) extent of one per-block scale; also the K extent of one
# activation group of `tcgemm.quantize`. Fixed by the kernels.
SCALE_BLOCK = 128

# Layouts of a scale, as scaled_gemm reads them. An operand is seen as [rows, K]: A as given
# ([M, K]), B transposed ([N, K]); one scale covers:
PER_TENSOR = "per-tensor"  # every element: [] / [1] / [1, 1]
PER_ROW = "per-row"  # a row: per-token [M, 1] for A, per-channel [N] or [1, N] for B
PER_ROW_BLOCK = "per-row-block"  # 1x128: a row's 128-wide K block, [rows, ceil(K/128)]
PER_BLOCK_128X128 = "per-block-128x128"  # B only: 128 rows x 128 K, [ceil(N/128), ceil(K/128)]
# A packed 4-bit weight's fp32 scales per group of 64 or 32 inputs of a channel, [N, ceil(K/gs)]
# (quant_linear only, without int8 group scales or zero points; the group size read off the width).
PER_ROW_GROUP = "per-row-group"

# The group sizes of 4-bit weights with float group scales, in the order the decoders try them.
INT4_GROUP_SIZES = (SCALE_BLOCK, 64, 32)
# The dtypes of a packed 4-bit weight's scales per 64 or 32 inputs (a width other than ceil(K/128),
# int4_scale_groups > 1), which the kernels read in place and convert to fp32 exactly; every other
# weight scale is fp32 (csrc/ops/quant_linear.cpp, describe_weight_scale).
INT4_GROUP_SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def scale_blocks(extent):
    """ceil(extent / 128): the number of 128-wide blocks covering ``extent`` (int or SymInt)."""
    return (extent + SCALE_BLOCK - 1) // SCALE_BLOCK


def groups_of(extent, group_size: int = SCALE_BLOCK):
    """ceil(extent / group_size): the number of groups of ``group_size`` covering ``extent`` (int or SymInt)."""
    return (extent + group_size - 1) // group_size


def weight_group_size(width, k) -> Optional[int]:
    """The group size of a 4-bit weight's fp32 scale table [N, ``width``] for K = ``k`` inputs:
    the first of 128, 64, 32 with ceil(K / size) == ``width`` (two sizes give one width only where
    K is at most the smaller, and then both mean one group); None for any other width."""
    return next((size for size in INT4_GROUP_SIZES if groups_of(k, size) == width), None)


def k_blocks(k):
    """The K blocks of scaled_gemm's per-block scales: ceil(K / 128), and 1 for K == 0."""
    blocks = scale_blocks(k)
    return max(1, blocks) if isinstance(blocks, int) else torch.sym_max(1, blocks)  # no guard on a SymInt


def quantize_scale_shape(granularity: str, m, k) -> tuple:
    """Shape of the scales ``tcgemm.quantize`` gives x [M, K]: [] per tensor, [M, 1] per token,
    [M, ceil(K/128)] per group (a 1x128 block of a row; 0 groups when K == 0)."""
    return {"tensor": (), "token": (m, 1), "group": (m, scale_blocks(k))}[granularity]


# The layout each weight granularity of a layer stores its scales in (tcgemm.quant_linear's
# weight_scale, told apart by rank: see decode_weight_scale).
WEIGHT_LAYOUTS = {"channel": PER_ROW, "group": PER_ROW_BLOCK, "block": PER_BLOCK_128X128}


def weight_scale_shape(n, k, granularity: str, group_size: int = SCALE_BLOCK) -> tuple:
    """Shape of the fp32 scales of a weight [N, K]: [N] per channel, [N, ceil(K/group_size)] per
    group of each output channel (1x128, or 1x64 / 1x32 for 4-bit weights), [ceil(N/128),
    ceil(K/128)] per 128x128 block."""
    return {"channel": (n,), "group": (n, groups_of(k, group_size)),
            "block": (scale_blocks(n), scale_blocks(k))}[granularity]


def _numel(shape: Sequence) -> object:
    n = 1
    for size in shape:
        n = n * size
    return n


# The shape rules of each operand's layouts, in scaled_gemm's order of resolution. Generators:
# a decoder stops at the first match, so a traced call adds no guards for the later rules.
def _scale_a_matches(shape: list, m, k) -> Iterator[str]:
    if len(shape) <= 2 and _numel(shape) == 1:
        yield PER_TENSOR
    if len(shape) == 2 and shape[0] == m:
        if shape[1] == 1:
            yield PER_ROW
        if shape[1] == k_blocks(k):
            yield PER_ROW_BLOCK


def _weight_block_matches(shape: list, n, kb) -> Iterator[str]:
    """The 2-D per-block layouts of a weight's scales with kb columns: 128x128 blocks, then a
    channel's 1x128 blocks (csrc/common/scale_layout.h, decode_scale_b_blocks)."""
    if len(shape) == 2 and shape[1] == kb:
        if shape[0] == scale_blocks(n):
            yield PER_BLOCK_128X128
        if shape[0] == n:
            yield PER_ROW_BLOCK


def _scale_b_matches(shape: list, n, k) -> Iterator[str]:
    if len(shape) <= 2 and _numel(shape) == 1:
        yield PER_TENSOR
    if (len(shape) == 1 and shape[0] == n) or (len(shape) == 2 and shape[0] == 1 and shape[1] == n):
        yield PER_ROW
    yield from _weight_block_matches(shape, n, k_blocks(k))


def scale_b_layouts(shape: Sequence, n, k) -> list[str]:
    """Every layout of scale_b (of B [K, N], seen as [N, K]) that ``shape`` fits, in scaled_gemm's
    order: per-tensor, per-channel ([N], [1, N]), 128x128 blocks, per-channel 1x128 blocks."""
    return list(_scale_b_matches(list(shape), n, k))


def decode_scale_a(shape: Sequence, m, k) -> Optional[str]:
    """The layout scaled_gemm reads scale_a of ``shape`` as (A is [M, K]); None if it rejects it."""
    return next(_scale_a_matches(list(shape), m, k), None)


def decode_scale_b(shape: Sequence, n, k) -> Optional[str]:
    """The layout scaled_gemm reads scale_b of ``shape`` as (B is [K, N]); None if it rejects it."""
    return next(_scale_b_matches(list(shape), n, k), None)


def decode_weight_scale(shape: Sequence, n, k) -> Optional[str]:
    """The layout ``tcgemm.quant_linear`` reads the scales of a weight [N, K] of ``shape`` as
    (never ambiguous): [N] per channel; [ceil(N/128), ceil(K/128)] 128x128 blocks;
    [N, ceil(K/128)] a channel's 1x128 blocks; else [N, 1] per channel (``tcgemm.quantize``'s
    scales of the weight's rows). None if it rejects the shape."""
    shape = list(shape)
    if len(shape) == 1 and shape[0] == n:
        return PER_ROW
    block = next(_weight_block_matches(shape, n, scale_blocks(k)), None)
    if block is None and shape == [n, 1]:
        return PER_ROW
    return block


# The shapes each decoder accepts, as the ops' error messages name them (csrc/common/scale_layout.h
# words them the same): m, n the operand's rows, kb its K blocks as the decoder counts them.
def weight_block_shapes(n, kb) -> str:
    return (f"[ceil(N/128), ceil(K/128)] = [{scale_blocks(n)}, {kb}] (per-block 128x128) or "
            f"[N, ceil(K/128)] = [{n}, {kb}]")


def scale_a_shapes(m, kb) -> str:
    return f"[] or [1] (per-tensor), [M, 1] = [{m}, 1] (per-token) or [M, ceil(K/128)] = [{m}, {kb}] (per-block 1x128)"


def scale_b_shapes(n, kb) -> str:
    return f"[] or [1] (per-tensor), [N] = [{n}] or [1, N] (per-channel), {weight_block_shapes(n, kb)}"


def weight_scale_shapes(n, kb) -> str:
    return f"[N] = [{n}] or [N, 1] (per-channel), {weight_block_shapes(n, kb)}"


def int4_group_shapes(n, k) -> str:
    """What quant_linear's message adds to :func:`weight_scale_shapes` for a packed 4-bit weight:
    its scales per group of 64 or 32 inputs (csrc/ops/quant_linear.cpp words them the same)."""
    return (f", or, 4-bit per group of 64 or 32 inputs, [N, ceil(K/64)] = [{n}, {groups_of(k, 64)}] or "
            f"[N, ceil(K/32)] = [{n}, {groups_of(k, 32)}]")


def int4_scale_groups(shape: Sequence, n, k) -> int:
    """How many groups of a packed 4-bit weight's fp32 scales of ``shape`` one K block of 128
    holds (csrc/common/scale_layout.h, weight_scale_groups): 2 or 4 for [N, ceil(K/64)] or [N,
    ceil(K/32)] (widths other than ceil(K/128)), else 1."""
    shape = list(shape)
    if len(shape) != 2 or shape[0] != n:
        return 1
    size = weight_group_size(shape[1], k)
    return SCALE_BLOCK // size if size is not None else 1


def int4_scale_dtypes(k, group_size: int) -> tuple:
    """The dtypes ``tcgemm.quant_linear`` reads a 4-bit weight's float group scales [N,
    ceil(K/group_size)] in: fp32, bf16 or fp16 per group of 64 or 32 inputs (INT4_GROUP_SCALE_DTYPES);
    fp32 per 128 inputs, and where K <= group_size (one group a row, a width the op reads as per 128)."""
    return INT4_GROUP_SCALE_DTYPES if groups_of(k, group_size) != scale_blocks(k) else (torch.float32,)


def scale_b_is_ambiguous(shape: Sequence, n, k) -> bool:
    """Whether ``shape`` fits several scale_b layouts that mean different things, so that
    scaled_gemm reads it as the first of them (:func:`decode_scale_b`) whatever was meant.

    One-element and empty scales mean the same in every layout they fit. The case that remains:
    128x128 block scales [1, ceil(K/128)] with N <= 128 and ceil(K/128) == N > 1, read as
    per-channel [1, N]. The per-channel-1x128 form [N, ceil(K/128)] of the same scales is not
    ambiguous.
    """
    return _numel(shape) > 1 and len(scale_b_layouts(shape, n, k)) > 1


def scale_varies_along_k(scale: torch.Tensor, layout: str, k) -> bool:
    """Whether scales of ``layout`` change from one K block to the next, which makes scaled_gemm
    run per-block (partial sums promoted every 128 of K): the block layouts with more than one
    K block (groups of 64 or 32: more than one group), unless the K stride of the scale tensor is
    0 (an ``expand``-ed scale)."""
    if layout == PER_ROW_GROUP:
        return scale.shape[1] > 1 and scale.stride(1) != 0
    return layout in (PER_ROW_BLOCK, PER_BLOCK_128X128) and k_blocks(k) > 1 and scale.stride(1) != 0


def expand_scale(scale: torch.Tensor, layout: str, rows: int, k: int) -> torch.Tensor:
    """The [rows, ceil(K/128)] table ``s[r, kb]`` of a scale tensor of ``layout`` (a view where
    it can be): the scale of row ``r`` (a token of A, an output channel of B) in K block ``kb``."""
    kb = k_blocks(k)
    if layout == PER_TENSOR:
        return scale.reshape(1, 1).expand(rows, kb)
    if layout == PER_ROW:
        return scale.reshape(rows, 1).expand(rows, kb)
    if layout == PER_ROW_BLOCK:
        return scale.reshape(rows, kb)
    if layout == PER_BLOCK_128X128:
        return scale.repeat_interleave(SCALE_BLOCK, dim=0)[:rows]
    raise ValueError(f"expand_scale: unknown layout {layout!r}")


def per_element(table: torch.Tensor, k: int, group_size: int = SCALE_BLOCK) -> torch.Tensor:
    """A [rows, ceil(K/group_size)] table (of :func:`expand_scale`: groups of 128) as one scale
    per element [rows, K] (the last group cut short)."""
    if table.shape[1] == 1:
        return table.expand(table.shape[0], k)
    return table.repeat_interleave(group_size, dim=1)[:, :k]


def expand_weight_scale(scale: torch.Tensor, n: int, k: int, granularity: str,
                        group_size: int = SCALE_BLOCK) -> torch.Tensor:
    """The scales of a weight [N, K] of ``granularity`` (``"group"``: groups of ``group_size``)
    as one value per element [N, K]: ``weight * expand_weight_scale(...)`` is the dequantized weight."""
    if granularity == "group" and group_size != SCALE_BLOCK:
        return per_element(scale.reshape(n, groups_of(k, group_size)), k, group_size)
    return per_element(expand_scale(scale, WEIGHT_LAYOUTS[granularity], n, k), k)

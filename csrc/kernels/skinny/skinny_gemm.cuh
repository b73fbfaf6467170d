// Skinny-M int8 GEMM (sm_80+, mma.sync m16n8k32): problems with a few rows of A, where the run
// is a stream of B (decode-time linear layers), on every architecture from Ampere on.
//
//   block: 8 warps share one (16 * RowTiles) x (8 * ColTiles) tile of D and split K between them in
//     128-byte K blocks: warp w takes K blocks w, w + 8, ..., so the eight warps read each B
//     row's consecutive kilobyte together.
//   loads: per K block a lane loads 32 bytes of each of its rows straight into registers, as two
//     16-byte loads at bytes 16t and 64 + 16t: the four lanes of a row cover whole 32-byte
//     sectors with each load instruction. B past L1 with an evict_first L2 policy (read once), A
//     through L1 (every block reads it). B runs kDepth K blocks ahead of the mma (kDepth - 1
//     when promoting per-block scales).
//   K order: a dot product does not depend on the order of K, so the bytes are paired as
//     loaded instead of in mma.sync's fragment order: at k-step s, lane (g, t) = (lane / 4,
//     lane % 4) feeds its k-slots 4t.. and 16 + 4t.. with words 2s and 2s + 1 of the 8 words it
//     loaded of its row (lane_bytes), for A and B alike (ptx/mma.cuh has the fragment layout).
//   per-block scales: each K block's exact int32 partial sums are promoted into fp32
//     accumulators with that block's scales, loaded with the block's B (one K block fewer in
//     flight, so that the registers hold them).
//   reduction: the warps' sums meet in shared memory and the block's threads add them (int32
//     wraps, so the total is exact in any order; fp32 in a fixed warp order) and apply the
//     epilogue functor, one element per thread.
// The K tail (K % 128 bytes) is one more K block whose bytes past K read as zero.
//   overlap (GemmProblem::pdl): launched as a programmatic dependent launch, the kernel starts
//     while the activations' quantize still runs: the block prefetches the bytes of B its warps
//     load in their first round into L2 (one bulk prefetch per row, no registers held), then
//     waits (griddep_wait) before it touches anything else. Only the first wave of blocks
//     prefetches: a later block starts after the kernel before it has finished. Against 4-bit B
//     with an int8 A given, the block instead starts its rings' copies before griddep_wait; where
//     it quantizes x itself, after griddep_wait and the loads of x. After its main loop a block
//     lets the next kernel be scheduled.
//   4-bit B (GemmProblem::b_int4, common/int4.h): a K block of a row is 64 bytes, a lane's share
//     one 16-byte piece (16t) holding K 32t .. 32t + 31, so A's lane bytes follow (32t + 16v). At
//     k-step s the packed word s unpacks into the two B words the mma takes (times 16: the
//     nibbles shifted into the high half of their bytes), its even and its odd K, and A's words
//     2s and 2s + 1 are re-paired the same way (two byte permutes per 8 bytes of A, where B's
//     order would take two per 8 values of every n8 tile). Each K block's int32 sums then lose the
//     factor 16 exactly (an arithmetic shift) and are added times the block's int8 group scale
//     (two-level scales: the sum over all of K equals that of the unpacked int8 weight, bit for
//     bit, since int32 arithmetic wraps) or promoted with per-block fp32 scales. At most 8 rows of A
//     with int32 sums: the weight is the mma's A operand instead (TileSums::kWeightRows), 16
//     weight rows per mma.
//     The grid is persistent and each warp streams its K blocks of the block's tiles, one tile
//     after another, through a ring of shared memory by cp.async (Int4Stream): kStages - 1 K
//     blocks stay in flight while it computes, across tile boundaries too, without holding
//     registers. On sm90 the blocks of a cluster may share each tile (p.cluster_k_split: its K
//     blocks dealt over all the cluster's warps, WarpWork), their sums meeting in distributed
//     shared memory (TileSums::store). The copies take no L2 policy: cp.async under an .L2::cache_hint policy stopped
//     the quantizing kernel with an illegal instruction on an H100. They ask for L2::256B: each
//     64-byte K block of a weight row fetches the 256 bytes around it, the K blocks the block's
//     other warps copy next (H200 A/B, bench_decode W4A8: big layers 3-5% faster at M = 1,
//     1-4% at 16; docs/design/int4.md). (Loaded into registers a
//     round at a time like int8 B, the unpacking between two rounds left DRAM 35% busy:
//     docs/design/int4.md.)
//   A quantized in the kernel (tcgemm.quant_linear at up to 4 rows, skinny_quantize.cuh): each
//     block of a persistent grid quantizes the float rows of x into shared memory once, then
//     takes its tiles reading A from there; the epilogue reads the block's scales.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "common/math.h"
#include "common/problem.h"
#include "epilogue/block_scales.h"
#include "epilogue/epilogues.h"
#include "kernels/skinny/configs.h"
#include "kernels/skinny/skinny_gemm.h"
#include "kernels/skinny/skinny_quantize.cuh"
#include "common/launch_kernel.cuh"
#include "ptx/cache_policy.cuh"
#include "ptx/cluster.cuh"
#include "ptx/cp_async.cuh"
#include "ptx/griddep.cuh"
#include "ptx/prefetch.cuh"
#include "ptx/sreg.cuh"
#include "ptx/ld_global.cuh"
#include "ptx/mma.cuh"

namespace tcgemm::skinny {

// Where an operand row is read from: B streams past L1 (read once), A goes through L1 (every
// block reads it) or, quantized by the block itself, lies in shared memory.
enum class From { kStream, kCached, kShared };

// Byte of a K block where piece v (0, 1) of lane t's 16-byte loads starts: each load instruction
// of a warp reads 64 contiguous bytes of a row (two whole sectors; with 32 contiguous bytes per
// lane, each instruction read half of every sector it touched and the next one asked for the
// other half again). Against 4-bit B, whose K block a lane reads as the 16 bytes at 16t (K 32t ..
// 32t + 31), A's lane bytes are those K.
template <bool BInt4 = false>
__device__ __forceinline__ int lane_bytes(int t, int v) {
  return BInt4 ? 32 * t + 16 * v : 16 * t + 64 * v;
}

// Bytes of a K block of one row of B.
template <bool BInt4>
constexpr int b_block_bytes() {
  return BInt4 ? kBK / kInt4PerByte : kBK;
}

// Piece v (16 bytes) of a lane's 32 bytes of a row into words 4v .. 4v + 3 of its 8.
__device__ __forceinline__ void put_piece(uint32_t (&r)[8], int v, uint4 x) {
  r[4 * v + 0] = x.x;
  r[4 * v + 1] = x.y;
  r[4 * v + 2] = x.z;
  r[4 * v + 3] = x.w;
}

// The 16 bytes of `row` from byte `at`, as 4 little-endian words; those at or past byte `end`
// read as zero and are not touched.
__device__ __forceinline__ uint4 load16_before(const uint8_t* row, int64_t at, int64_t end) {
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if (at + i < end) w[i / 4] |= static_cast<uint32_t>(row[at + i]) << (8 * (i % 4));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Lane t's 32 bytes of K block kb of one operand row (lane_bytes) as 8 little-endian words.
// Masked: bytes at or past k read as zero (and are not touched). Rows in shared memory are padded
// to whole K blocks.
template <From Src, bool Masked, bool BInt4 = false>
__device__ __forceinline__ void load_row32(uint32_t (&r)[8], const uint8_t* row, int kb, int t, int64_t k,
                                           uint64_t policy) {
#pragma unroll
  for (int v = 0; v < 2; ++v) {
    const int64_t kv = int64_t{kb} * kBK + lane_bytes<BInt4>(t, v);
    uint4 x;
    if (Src == From::kShared) {
      x = *reinterpret_cast<const uint4*>(row + kv);
    } else if (!Masked || kv + 16 <= k) {
      x = Src == From::kStream ? ptx::ld_global_stream_v4(row + kv, policy) : ptx::ld_global_nc_v4(row + kv);
    } else {
      x = load16_before(row, kv, k);
    }
    put_piece(r, v, x);
  }
}

// Lane t's 16 bytes of K block kb of a packed 4-bit row (K 32t .. 32t + 31) as 4 words, bytes at
// or past bytes = K / 2 read as zero (the K tail; whole K blocks come through the rings).
__device__ __forceinline__ void load_packed16(uint32_t (&r)[4], const uint8_t* row, int kb, int t, int64_t bytes,
                                              uint64_t policy) {
  const int64_t at = int64_t{kb} * b_block_bytes<true>() + 16 * t;
  const uint4 x = at + 16 <= bytes ? ptx::ld_global_stream_v4(row + at, policy) : load16_before(row, at, bytes);
  r[0] = x.x;
  r[1] = x.y;
  r[2] = x.z;
  r[3] = x.w;
}

// An int8 table per 1x128 group of B (two-level group scales, or zero points) at one K block for
// a lane's two columns of each n8 tile (a default for every column when the problem has none).
template <int ColTiles>
struct Int4GroupScales {
  int32_t s[ColTiles][2];
  __device__ int32_t get(int nt, int e) const { return s[nt][e]; }
  __device__ static Int4GroupScales all(int32_t v) {
    Int4GroupScales g;
#pragma unroll
    for (int nt = 0; nt < ColTiles; ++nt) g.s[nt][0] = g.s[nt][1] = v;
    return g;
  }
};

// Where a lane's columns' entries of such a table lie (their rows' offsets in it, found once per
// tile), and the entries of one K block (`absent` without the table: 1 for group scales, 0 for
// zero points). The lane's columns of D are 2t + e of each n8 tile; WeightRows
// (TileSums::kWeightRows: the weight is the mma's A operand) the lane's weight rows are g of each
// n8 tile of B, one entry per tile (e = 0).
template <int ColTiles, bool WeightRows = false>
struct Int4GroupScaleRows {
  static constexpr int kPerTile = WeightRows ? 1 : 2;
  const int8_t* base;  // p.b_group_scale or p.b_zero_point
  uint32_t row[ColTiles][kPerTile];

  __device__ void start(const int8_t* table, int64_t stride, const GemmProblem& p, int n0, int lane) {
    base = table;
#pragma unroll
    for (int nt = 0; nt < ColTiles; ++nt)
#pragma unroll
      for (int e = 0; e < kPerTile; ++e) {
        const int n = n0 + 8 * nt + (WeightRows ? lane / 4 : 2 * (lane % 4) + e);
        row[nt][e] = static_cast<uint32_t>(min(n, p.n - 1) * stride);
      }
  }
  __device__ Int4GroupScales<ColTiles> load(int kb, int32_t absent) const {
    Int4GroupScales<ColTiles> g;
#pragma unroll
    for (int nt = 0; nt < ColTiles; ++nt)
#pragma unroll
      for (int e = 0; e < kPerTile; ++e) g.s[nt][e] = base == nullptr ? absent : __ldg(base + (row[nt][e] + kb));
    return g;
  }
};

// The sum of a lane's 32 bytes of one row of signed A in a K block, then over the four lanes of
// its group (lane / 4): the row's sum over the K block (zero points: sum (q - z) x = sum q x - z
// sum x over each group of 128).
__device__ __forceinline__ int32_t row_sum_of_block(const uint32_t (&a)[8]) {
  int32_t s = 0;
#pragma unroll
  for (int w = 0; w < 8; ++w) s = __dp4a(static_cast<int>(a[w]), 0x01010101, s);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  return s + __shfl_xor_sync(0xffffffffu, s, 2);
}

// The blocks of a cluster that share each tile's K (GemmProblem::cluster_k_split): 1 before
// sm_90, where dispatch asks for no clusters (and the code for them folds away).
__device__ __forceinline__ int cluster_split(const GemmProblem& p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return p.cluster_k_split;
#else
  return 1;
#endif
}

// Byte offset of a row: the index is never negative, and widening it as unsigned keeps a sign
// word per row out of the registers (sm_80's promoting kernels spilled one at the 128 cap).
__device__ __forceinline__ int64_t row_offset(int row, int64_t stride) {
  return static_cast<int64_t>(static_cast<uint32_t>(row)) * stride;
}

// The rows of B a lane (group g = lane / 4) reads for the n8 tiles of columns n0 ...: rows past
// the edge clamp (their results are computed and not stored).
template <int ColTiles>
__device__ __forceinline__ void b_rows_of(const GemmProblem& p, int n0, int g, const uint8_t* (&b_row)[ColTiles]) {
#pragma unroll
  for (int nt = 0; nt < ColTiles; ++nt)
    b_row[nt] = static_cast<const uint8_t*>(p.b.ptr) + row_offset(min(n0 + 8 * nt + g, p.n - 1), p.b.stride_row);
}

// K blocks of int8 B a warp keeps in flight in registers: kDepth, one fewer when promoting
// per-block scales (their registers).
template <class Cfg, class Epi>
constexpr int k_ahead() {
  return Epi::kPromotes && Cfg::kDepth > 1 ? Cfg::kDepth - 1 : Cfg::kDepth;
}

// The ring of shared memory through which each warp streams packed 4-bit B (Int4Stream): per
// warp kStages slots of one K block of its rows (a lane's 16 bytes per n8 tile, the warp's lanes
// 16 bytes apart: no bank conflicts), kStages - 1 K blocks in flight.
template <class Cfg>
struct Int4Ring {
  static constexpr int kSlotBytes = Cfg::kColTiles * 32 * 16;
  static constexpr int kStages = std::max(3, kInt4RingBytesPerWarp / kSlotBytes);
  static constexpr int kBytes = kWarps * kStages * kSlotBytes;
  __device__ static uint8_t* slot(uint8_t* ring, int warp, int stage, int nt, int lane) {
    return ring + (((warp * kStages + stage) * Cfg::kColTiles + nt) * 32 + lane) * 16;
  }
};

// The work of one warp of a persistent grid of clusters of p.cluster_k_split blocks (1: no
// clusters): the tiles c, c + C, ... of its cluster c of C (first and next() give their (row,
// column) tile coordinates, has() whether one is in D), of each the K blocks k_first, k_first +
// k_step, ... below K's whole K blocks (per_tile), where k_first is the warp's slot among the
// cluster's warps (rank * kWarps + warp) and k_step their number. D of one tile row (every problem
// up to 16 rows) takes no division: the grid has at most a cluster per tile.
struct WarpWork {
  struct Tile {
    int row, col;
  };
  Tile first;
  int rows, cols, step_rows, step_cols;  // tile rows and columns of D; the clusters in tile rows and columns
  int k_first, k_step;
  int per_tile;

  __device__ static WarpWork of_block(const GemmProblem& p, int tile_rows, int tile_cols) {
    const unsigned rows = ceil_div(p.m, tile_rows), cols = ceil_div(p.n, tile_cols);
    const unsigned split = cluster_split(p);
    const unsigned first = blockIdx.x / split, step = gridDim.x / split;
    const int warp = threadIdx.x / 32, full_blocks = p.k / kBK;
    WarpWork w;
    if (rows == 1 && first < cols && step <= cols) {
      w.first = {0, static_cast<int>(first)};
      w.step_rows = step == cols;
      w.step_cols = step == cols ? 0 : step;
    } else {
      w.first = {static_cast<int>(first / cols), static_cast<int>(first % cols)};
      w.step_rows = step / cols;
      w.step_cols = step % cols;
    }
    w.rows = rows;
    w.cols = cols;
    w.k_first = static_cast<int>(ptx::cluster_ctarank()) * kWarps + warp;
    w.k_step = static_cast<int>(split) * kWarps;
    w.per_tile = w.k_first < full_blocks ? ceil_div(full_blocks - w.k_first, w.k_step) : 0;
    return w;
  }
  __device__ bool has(const Tile& t) const { return t.row < rows; }
  // The int8 group scales (p.b_group_scale) that the block's K blocks of tile t read, into L2, by
  // the block's first warp: lane l takes weight row l of the tile's tile_cols, a prefetch per
  // 128-byte line. TileSums loads them one K block at a time, right before they are needed:
  // without the prefetch the first K block of each tile waited for a trip to memory. (Into L1
  // instead: the same timings, and a cluster-scope acquire invalidates L1.)
  __device__ void prefetch_group_scales(const GemmProblem& p, const Tile& t, int tile_cols) const {
    const int lane = threadIdx.x % 32, full_blocks = p.k / kBK;
    const int k_block_first = k_first - threadIdx.x / 32;  // the block's first warp's
    if (threadIdx.x >= tile_cols || p.b_group_scale == nullptr || !has(t) || k_block_first >= full_blocks) return;
    const int n = min(t.col * tile_cols + lane, p.n - 1);
    const int8_t* row = p.b_group_scale + static_cast<int64_t>(n) * p.b_group_scale_stride;
    constexpr uintptr_t kLine = 128;
    const uintptr_t last = reinterpret_cast<uintptr_t>(row + full_blocks - 1);
    for (uintptr_t at = reinterpret_cast<uintptr_t>(row + k_block_first) & ~(kLine - 1); at <= last; at += kLine)
      ptx::prefetch_l2(reinterpret_cast<const void*>(at));
  }
  __device__ void next(Tile& t) const {
    t.row += step_rows;
    t.col += step_cols;
    if (t.col >= cols) t.col -= cols, ++t.row;
  }
};

// A warp's stream of packed 4-bit B through its ring (Int4Ring), in WarpWork's order across the
// block's tiles: issue() starts the cp.async of the next item (one commit group per call, empty
// past the last item), read() waits for the oldest item not yet read and returns the lane's words.
// Each lane reads only the bytes it copied itself, so a lane waits for its own copies and no
// barrier is needed; an item goes into the slot of the item kStages - 1 before it, which the warp
// read before it computed that item. The addresses of the tile being issued are found once per
// tile, and move on by a K block round per item.
template <class Cfg>
struct Int4Stream {
  using Ring = Int4Ring<Cfg>;
  uint8_t* ring;
  WarpWork work;
  WarpWork::Tile tile;                // of the next item issued
  int q = 0;                          // the next item's K block index in its tile
  int slot_in = 0, slot_out = 0;      // the slots of the next item issued and read
  bool tile_pending = false;          // the next item starts a tile whose addresses are not yet found
  const uint8_t* next[Cfg::kColTiles];  // the lane's 16 bytes of the next item issued, per n8 tile

  __device__ void find_tile(const GemmProblem& p) {
    const int lane = threadIdx.x % 32;
    b_rows_of(p, tile.col * Cfg::kCols, lane / 4, next);
#pragma unroll
    for (int nt = 0; nt < Cfg::kColTiles; ++nt)
      next[nt] += work.k_first * b_block_bytes<true>() + 16 * (lane % 4);
  }
  __device__ void issue() {
    if (work.per_tile > 0 && work.has(tile)) {
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
      for (int nt = 0; nt < Cfg::kColTiles; ++nt) {
        ptx::cp_async_16_l2_256(Ring::slot(ring, warp, slot_in, nt, lane), next[nt]);
        next[nt] += work.k_step * b_block_bytes<true>();
      }
      slot_in = slot_in + 1 == Ring::kStages ? 0 : slot_in + 1;
      if (++q == work.per_tile) q = 0, work.next(tile), tile_pending = true;
    }
    ptx::cp_async_commit();
  }
  // The first kStages - 1 items.
  __device__ void start(const GemmProblem& p) {
    tile = work.first;
    if (work.has(tile)) find_tile(p);
#pragma unroll
    for (int i = 0; i < Ring::kStages - 1; ++i) advance(p);
  }
  // issue(), finding the addresses of a new tile first.
  __device__ void advance(const GemmProblem& p) {
    if (tile_pending) {
      tile_pending = false;
      find_tile(p);
    }
    issue();
  }
  // The oldest item not yet read (after start() and one advance() per item read before it).
  __device__ void read(uint32_t (&b)[Cfg::kColTiles][4]) {
    ptx::cp_async_wait<Ring::kStages - 2>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int nt = 0; nt < Cfg::kColTiles; ++nt) {
      const uint4 x = *reinterpret_cast<const uint4*>(Ring::slot(ring, warp, slot_out, nt, lane));
      b[nt][0] = x.x;
      b[nt][1] = x.y;
      b[nt][2] = x.z;
      b[nt][3] = x.w;
    }
    slot_out = slot_out + 1 == Ring::kStages ? 0 : slot_out + 1;
  }
};

// The first round of B of a block's first tile, staged in shared memory by cp.async while the
// block quantizes x (a kernel that quantizes x itself, int8 B): each lane's own 32 bytes per K
// block and n8 tile as two 16-byte pieces (lane_bytes), so that a lane waits only for its own
// copies; the warp's lanes are 16 bytes apart in each piece (no bank conflicts).
template <class Cfg, class Epi>
struct StagedRound {
  static constexpr int kBytes = kWarps * k_ahead<Cfg, Epi>() * Cfg::kColTiles * 2 * 32 * 16;
  __device__ static uint8_t* piece(uint8_t* base, int warp, int d, int nt, int v, int lane) {
    return base + ((((warp * k_ahead<Cfg, Epi>() + d) * Cfg::kColTiles + nt) * 2 + v) * 32 + lane) * 16;
  }
  // Issues this lane's copies for K blocks warp, warp + kWarps, ... of the first round.
  __device__ static void stage(uint8_t* base, const uint8_t* const (&b_row)[Cfg::kColTiles], int full_blocks) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int d = 0; d < k_ahead<Cfg, Epi>(); ++d) {
      const int kb = warp + kWarps * d;
      if (kb >= full_blocks) break;
#pragma unroll
      for (int nt = 0; nt < Cfg::kColTiles; ++nt)
#pragma unroll
        for (int v = 0; v < 2; ++v)
          ptx::cp_async_16(piece(base, warp, d, nt, v, lane), b_row[nt] + int64_t{kb} * kBK + lane_bytes(lane % 4, v));
    }
    ptx::cp_async_commit();
  }
  // A lane's 8 words of one staged K block.
  __device__ static void load_words(uint32_t (&r)[8], uint8_t* base, int warp, int d, int nt, int lane) {
#pragma unroll
    for (int v = 0; v < 2; ++v) put_piece(r, v, *reinterpret_cast<const uint4*>(piece(base, warp, d, nt, v, lane)));
  }
};

// Where B's staged round or ring starts in a block's dynamic shared memory: after x_bytes of x
// (QuantizedA), or at 0.
TCGEMM_HD constexpr int b_smem_at(int x_bytes) { return round_up(x_bytes, 128); }

struct NoGroupScales {};

// One warp's share of a tile of D: its accumulators over the K blocks it takes, the rows of A
// it reads, and the sum over the block's warps into D (store). ASrc: A in global memory (L1) or
// in shared memory. BInt4: B's K blocks arrive as packed 4-bit words (4 per n8 tile), else as
// int8 (8 words); A's bytes are then paired even/odd as the unpacked words are
// (pair_even_odd). HalfRows: D has at most 8 rows (one m16 tile, whose rows 8-15 are never
// stored): A's rows g + 8 are not loaded (the mma takes rows g twice) nor their sums scaled.
// OneRow: D has one row (kWeightRows: the sums of D's odd rows are not scaled).
// Slots > 1: 4-bit B with fp32 scales per group of 128 / Slots inputs (GemmProblem::
// b_scale_groups; 2 or 4). Lane t's bytes of a K block are all of group t * Slots / 4 (K 32t ..
// 32t + 31), so the tile's rows of A are slots: row r holds row r / Slots of the tile's rows of D
// where group r % Slots is its lane's, zeros elsewhere. Each mma then sums each group apart, at
// no more mma per K block where Slots * M rows still fit the tile; the slots' rows are promoted
// with their group's scales, and added across the Slots lanes of each row of D at the end
// (fold_slots). A tile holds 16 / Slots rows of D (8 / Slots with HalfRows). GroupT: those
// scales' element, float, Bf16Bits or F16Bits (MmaSyncPromotion).
template <int RowTiles, int ColTiles, bool ASigned, bool BSigned, From ASrc, class Epi, bool BInt4,
          bool HalfRows = false, bool OneRow = false, bool BZero = false, int Slots = 1, class GroupT = float>
struct TileSums {
  static_assert(!HalfRows || RowTiles == 1, "HalfRows is one m16 tile");
  static_assert(Slots == 1 || ((Slots == 2 || Slots == 4) && BInt4 && Epi::kPromotes && !BZero),
                "slots: 4-bit B with fp32 scales per 64 or 32 inputs");
  using Acc = typename Epi::Acc;  // int32, or fp32 when per-block scales are promoted
  using Scales = MmaSyncPromotion<RowTiles, ColTiles, Slots, GroupT>;
  using Group = std::conditional_t<BInt4, Int4GroupScales<ColTiles>, NoGroupScales>;
  static constexpr bool kPerBlock = Epi::kPromotes;
  // 4-bit B against at most 8 rows of A, sums in int32 (two-level or no group scales): the weight
  // is the mma's A operand and A its B operand, D transposed. An m16 tile then holds 16 weight rows
  // (B's n8 tiles 2i and 2i + 1: rows g and g + 8 of m16 tile i) against 8 rows of A, instead of 8
  // weight rows against 16 rows of A of which at most 8 exist: half the mma and accumulators per
  // K block. The bytes each lane loads are the same. acc[0][i][j] is then D's row 2t + j % 2,
  // column n0 + 16i + g + 8 (j / 2).
  static constexpr bool kWeightRows = BInt4 && HalfRows && !kPerBlock && ColTiles % 2 == 0;
  static constexpr int kSumTiles = kWeightRows ? ColTiles / 2 : ColTiles;  // accumulator tiles in use
  using GroupRows = Int4GroupScaleRows<ColTiles, kWeightRows>;
  static constexpr int kBWords = BInt4 ? 4 : 8;  // registers of a lane's share of a K block of a B row
  static constexpr int kRegs = RowTiles * ColTiles * 4;  // accumulators per lane
  static constexpr int kStoredRegs = kWeightRows ? kSumTiles * 4 : kRegs;  // those store() sums
  static constexpr int kHalves = HalfRows ? 1 : 2;       // rows g and g + 8 of each m16 tile
  using A = uint32_t[RowTiles][kHalves][8];
  using B = uint32_t[ColTiles][kBWords];

  const uint8_t* a_row[RowTiles][kHalves];
  bool a_live;  // Slots: the lane's group is its rows' slot's (else its A reads as zero)
  int32_t acc[RowTiles][ColTiles][4];  // the whole K range, or one K block when promoting
  float accf[RowTiles][ColTiles][4];

  // f(mt, nt, j) for every accumulator register of the lane: m16 tile, n8 tile, fragment register.
  template <class F>
  __device__ __forceinline__ static void each_acc(F&& f) {
#pragma unroll
    for (int mt = 0; mt < RowTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < ColTiles; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) f(mt, nt, j);
  }

  // A tile of rows m0 ... from zero, for a lane of group g; A's rows at a_base, a_stride bytes
  // apart (rows past the edge clamp: their results are computed and not stored).
  __device__ __forceinline__ void start(const GemmProblem& p, const uint8_t* a_base, int64_t a_stride, int m0, int g) {
    a_live = Slots == 1 || g % Slots == static_cast<int>(threadIdx.x % 4) * Slots / 4;
#pragma unroll
    for (int mt = 0; mt < RowTiles; ++mt)
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
        a_row[mt][h] = a_base + row_offset(min(m0 + (16 * mt + g + 8 * h) / Slots, p.m - 1), a_stride);
    each_acc([&](int mt, int nt, int j) {
      acc[mt][nt][j] = 0;
      accf[mt][nt][j] = 0.0f;
    });
  }

  // The lane's bytes of K block kb of its rows of A (masked: bytes past K read as zero).
  template <bool Masked>
  __device__ __forceinline__ void load_a(const GemmProblem& p, int kb, int t, A& a) const {
#pragma unroll
    for (int mt = 0; mt < RowTiles; ++mt)
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        if (Slots > 1 && !a_live) {
#pragma unroll
          for (int w = 0; w < 8; ++w) a[mt][h][w] = 0;
          continue;
        }
        load_row32<ASrc, Masked, BInt4>(a[mt][h], a_row[mt][h], kb, t, p.k, 0);
        if constexpr (BInt4)
#pragma unroll
          for (int s = 0; s < kBK / 32; ++s) pair_even_odd(a[mt][h][2 * s], a[mt][h][2 * s + 1]);
      }
  }

  // One K block: its partial sums promoted with the block's scales if per-block; 4-bit B: the
  // block's sums on their own, then added times the group scales (or promoted), see the top.
  // BZero: less each column's zero point times the row's sum of A over the block (`zero`).
  __device__ __forceinline__ void add(const B& b, const A& a, const Scales& scales, const Group& group,
                                      const Group* zero = nullptr) {
    static_assert(!BZero || (BInt4 && ASigned && kPerBlock && !kWeightRows), "zero points: promoted 4-bit sums");
    if constexpr (kWeightRows) {
      int32_t block[kSumTiles][4];
#pragma unroll
      for (int i = 0; i < kSumTiles; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) block[i][j] = 0;
#pragma unroll
      for (int s = 0; s < kBK / 32; ++s) {
        const uint32_t xf[2] = {a[0][0][2 * s], a[0][0][2 * s + 1]};
#pragma unroll
        for (int i = 0; i < kSumTiles; ++i) {
          uint32_t w[4];  // rows g (n8 tile 2i) and g + 8 (2i + 1), K slots 4t .. then 16 + 4t ..
          unpack_int4x8_times16(b[2 * i][s], w[0], w[2]);
          unpack_int4x8_times16(b[2 * i + 1][s], w[1], w[3]);
          ptx::mma_m16n8k32<BSigned, ASigned>(block[i], w, xf);
        }
      }
#pragma unroll
      for (int i = 0; i < kSumTiles; ++i)
#pragma unroll
        for (int j = 0; j < 4; j += OneRow ? 2 : 1)
          acc[0][i][j] = wrap_add(acc[0][i][j], wrap_mul(block[i][j] >> 4, group.get(2 * i + j / 2, 0)));
      return;
    }
    constexpr bool kBlockSums = kPerBlock || BInt4;
    int32_t block[RowTiles][ColTiles][4];
    int32_t(*sums)[ColTiles][4] = kBlockSums ? block : acc;
    if constexpr (kBlockSums) each_acc([&](int mt, int nt, int j) { block[mt][nt][j] = 0; });
#pragma unroll
    for (int s = 0; s < kBK / 32; ++s)
#pragma unroll
      for (int mt = 0; mt < RowTiles; ++mt) {
        const uint32_t af[4] = {a[mt][0][2 * s], a[mt][kHalves - 1][2 * s], a[mt][0][2 * s + 1],
                                a[mt][kHalves - 1][2 * s + 1]};
#pragma unroll
        for (int nt = 0; nt < ColTiles; ++nt) {
          uint32_t bf[2];
          if constexpr (BInt4) {
            unpack_int4x8_times16(b[nt][s], bf[0], bf[1]);
          } else {
            bf[0] = b[nt][2 * s];
            bf[1] = b[nt][2 * s + 1];
          }
          ptx::mma_m16n8k32<ASigned, BSigned>(sums[mt][nt], af, bf);
        }
      }
    if constexpr (BInt4)  // the factor 16 out (exact: a multiple of 16), the group scale in
      each_acc([&](int mt, int nt, int j) {
        if (!HalfRows || j < 2) block[mt][nt][j] = wrap_mul(block[mt][nt][j] >> 4, group.get(nt, j % 2));
      });
    if constexpr (BZero) {  // rows g and g + 8 of each m16 tile: their sums of A over the block
      int32_t row_sum[RowTiles][kHalves];
#pragma unroll
      for (int mt = 0; mt < RowTiles; ++mt)
#pragma unroll
        for (int h = 0; h < kHalves; ++h) row_sum[mt][h] = row_sum_of_block(a[mt][h]);
      each_acc([&](int mt, int nt, int j) {
        if (!HalfRows || j < 2) block[mt][nt][j] -= zero->get(nt, j % 2) * row_sum[mt][HalfRows ? 0 : j / 2];
      });
    }
    if constexpr (kPerBlock) {
      scales.promote_into(accf, block);
    } else if constexpr (BInt4) {
      each_acc([&](int mt, int nt, int j) {
        if (!HalfRows || j < 2) acc[mt][nt][j] = wrap_add(acc[mt][nt][j], block[mt][nt][j]);
      });
    }
  }

  // Slots: each slot's sums added into those of its row's first slot (lanes 4 apart: the slots of
  // a row are consecutive rows g of the tile), in a fixed order; before store().
  __device__ __forceinline__ void fold_slots() {
    if constexpr (Slots > 1)
      each_acc([&](int mt, int nt, int j) {
        if (HalfRows && j >= 2) return;  // rows g + 8, never stored
#pragma unroll
        for (int apart = 4; apart < 4 * Slots; apart *= 2)
          accf[mt][nt][j] += __shfl_xor_sync(0xffffffffu, accf[mt][nt][j], apart);
      });
  }

  // Where element idx of a tile at (m0, n0) lies in D: register idx / 32 of lane idx % 32 of
  // every warp (the mma's fragment layout, or its transpose with kWeightRows). Slots: only the
  // first slot of each row holds D's element (fold_slots; first_slot).
  __device__ __forceinline__ static void position(int idx, int m0, int n0, int& row, int& col) {
    const int i = idx / 32, l = idx % 32;
    const int mt = i / (ColTiles * 4), nt = (i / 4) % ColTiles, j = i % 4;
    row = kWeightRows ? m0 + 2 * (l % 4) + j % 2 : m0 + (16 * mt + l / 4 + 8 * (j / 2)) / Slots;
    col = kWeightRows ? n0 + 16 * nt + l / 4 + 8 * (j / 2) : n0 + 8 * nt + 2 * (l % 4) + j % 2;
  }
  __device__ __forceinline__ static bool first_slot(int idx) { return Slots == 1 || idx % 32 / 4 % Slots == 0; }

  // The block's warps' sums meet in shared memory (buffer `buffer` of Buffers); its threads add
  // them (int32 wraps, so the total is exact in any order; fp32 in a fixed warp order) and apply
  // the epilogue, one element per thread. Ends with the threads reading the shared sums: a block
  // that goes on to another tile must pass a barrier before it writes the same buffer again.
  // 4-bit B split between the blocks of a cluster (p.cluster_k_split): a cluster barrier instead
  // of the block's, then block r of the cluster finishes elements r, r + C, ... (in units of the
  // block's threads), adding the sums of every block's warps in rank order through distributed
  // shared memory (the barrier before the next tile but one keeps them until all have read).
  // Each thread's elements' row and column terms (epi.row, epi.col: scales and bias, from global
  // memory) are loaded before the barrier, so that their trips to memory overlap the wait for the
  // other warps instead of following it.
  template <int Buffers = 1>
  __device__ __forceinline__ void store(const GemmProblem& p, const Epi& epi, int m0, int n0, int buffer = 0) const {
    __shared__ Acc buffers[Buffers][kWarps][kRegs][32];
    Acc(&partial)[kWarps][kRegs][32] = buffers[buffer];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    each_acc([&](int mt, int nt, int j) {
      if (kWeightRows ? nt >= kSumTiles : HalfRows && j >= 2) return;  // unused; or rows g + 8, never in D
      if constexpr (kPerBlock) {
        partial[warp][(mt * ColTiles + nt) * 4 + j][lane] = accf[mt][nt][j];
      } else {
        partial[warp][(mt * ColTiles + nt) * 4 + j][lane] = acc[mt][nt][j];
      }
    });
    const int split = BInt4 ? cluster_split(p) : 1;
    const int rank = BInt4 && split > 1 ? static_cast<int>(ptx::cluster_ctarank()) : 0;
    // Element e of this thread: idx = threadIdx.x + kThreads * (rank + split * e) of the tile's
    // kStoredRegs * 32, at (row, col) of D; stored where it lies inside the tile and D.
    constexpr int kMost = ceil_div(kStoredRegs * 32, kThreads);
    auto element = [&](int e, int& idx, int& row, int& col) {
      idx = threadIdx.x + kThreads * (rank + split * e);
      position(idx, m0, n0, row, col);
      return idx < kStoredRegs * 32 && row < p.m && col < p.n && first_slot(idx);
    };
    // The row and column terms, loaded while the warps meet (with per-block promotion, after:
    // those kernels are at the register cap, and holding the terms across the barrier spilled).
    // A cluster's barrier arrives first: its release would wait for the loads to complete.
    typename Epi::Row row_terms[kMost];
    typename Epi::Col col_terms[kMost];
    auto load_terms = [&] {
      if constexpr (!kPerBlock) {
#pragma unroll
        for (int e = 0; e < kMost; ++e) {
          int idx, row, col;
          if (element(e, idx, row, col)) {
            row_terms[e] = epi.row(row);
            col_terms[e] = epi.col(col);
          }
        }
      }
    };
    if (BInt4 && split > 1) {
      ptx::cluster_arrive_release();
      load_terms();
      ptx::cluster_wait_acquire();
    } else {
      load_terms();
      __syncthreads();
    }

    auto add_into = [](Acc& sum, Acc x) {
      if constexpr (kPerBlock) {
        sum += x;
      } else {
        sum = wrap_add(sum, x);
      }
    };
    using Out = typename Epi::OutT;
    Out* d = static_cast<Out*>(p.d.ptr);
    // Element idx at (row, col): the warps' sums (every block's with a cluster split), then the
    // epilogue with its terms.
    auto finish = [&](int idx, int row, int col, const typename Epi::Row& row_term, const typename Epi::Col& col_term) {
      const int i = idx / 32, l = idx % 32;
      Acc sum = partial[0][i][l];
      if (!BInt4 || split == 1) {
#pragma unroll
        for (int w = 1; w < kWarps; ++w) add_into(sum, partial[w][i][l]);
      } else {
        constexpr uint32_t kWarpBytes = kRegs * 32 * sizeof(Acc);
        for (int r = 0; r < split; ++r) {
          const uint32_t at = ptx::cluster_map_shared(&partial[0][i][l], static_cast<uint32_t>(r));
#pragma unroll
          for (int w = 0; w < kWarps; ++w) {
            const Acc x = ptx::ld_shared_cluster(at + w * kWarpBytes, Acc{});
            if (r == 0 && w == 0) {
              sum = x;
            } else {
              add_into(sum, x);
            }
          }
        }
      }
      d[static_cast<int64_t>(row) * p.d.ld + col] = epi.full(sum, row_term, col_term, row, col);
    };
    if constexpr (kPerBlock) {  // a loop, not unrolled (the register cap), with the terms loaded here
#pragma unroll 1
      for (int e = 0;; ++e) {
        int idx, row, col;
        const bool in_d = element(e, idx, row, col);
        if (idx >= kStoredRegs * 32) break;
        if (in_d) finish(idx, row, col, epi.row(row), epi.col(col));
      }
    } else {
#pragma unroll
      for (int e = 0; e < kMost; ++e) {
        int idx, row, col;
        if (element(e, idx, row, col)) finish(idx, row, col, row_terms[e], col_terms[e]);
      }
    }
  }
};

// The epilogue's terms of a tile's columns n0 .. n0 + Cols - 1 into L2 (Epi::prefetch_col), one
// column per thread of the block's first threads, where the tile's K loop begins: the epilogue
// then finds them there instead of waiting for memory after the warps' sums meet. Not with
// per-block promotion: those kernels are at the register cap (the prefetch spilled).
template <int Cols, class Epi>
__device__ __forceinline__ void prefetch_cols(const GemmProblem& p, const Epi& epi, int n0) {
  static_assert(Cols <= kThreads, "a column per thread");
  if constexpr (!Epi::kPromotes)
    if (threadIdx.x < Cols) epi.prefetch_col(min(n0 + static_cast<int>(threadIdx.x), p.n - 1));
}

// Tile `tile` of D against int8 B, after griddep_wait: A's rows lie at a_base, a_stride bytes
// apart, in global memory (ASrc == From::kCached) or in shared memory (From::kShared, quantized
// by the block). B is loaded into registers kAhead K blocks at a time, then computed. Ends as
// TileSums::store. staged: the tile's first round of B (StagedRound, this thread's copies not yet
// waited for), or nullptr.
template <int RowTiles, int ColTiles, bool ASigned, bool BSigned, From ASrc, class Epi>
__device__ __forceinline__ void skinny_tile(const GemmProblem& p, const Epi& epi, const uint8_t* a_base,
                                            int64_t a_stride, int tile, uint8_t* staged = nullptr) {
  using Cfg = TileConfig<RowTiles, ColTiles>;
  using Sums = TileSums<RowTiles, ColTiles, ASigned, BSigned, ASrc, Epi, false>;
  constexpr bool kPerBlock = Epi::kPromotes;
  constexpr int kAhead = k_ahead<Cfg, Epi>();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int col_blocks = ceil_div(p.n, Cfg::kCols);
  const int m0 = tile / col_blocks * Cfg::kRows, n0 = tile % col_blocks * Cfg::kCols;
  prefetch_cols<Cfg::kCols>(p, epi, n0);
  Sums sums;
  sums.start(p, a_base, a_stride, m0, g);
  const uint8_t* b_row[ColTiles];
  b_rows_of(p, n0, g, b_row);
  const uint64_t stream = ptx::l2_policy_evict_first();

  // A K block: A loaded now (L1), B loaded ahead; with per-block scales, the block's scales,
  // loaded with B (a load of its own per K block, waited on at once, stalled every K block for a
  // trip to L2: docs/design/skinny.md).
  auto compute = [&](const typename Sums::B& b, int kb, auto masked, const typename Sums::Scales& scales) {
    typename Sums::A a;
    sums.template load_a<decltype(masked)::value>(p, kb, t, a);
    sums.add(b, a, scales, NoGroupScales{});
  };

  const int full_blocks = p.k / kBK;
  if (staged != nullptr) ptx::cp_async_wait<0>();
  for (int kb0 = warp; kb0 < full_blocks; kb0 += kWarps * kAhead) {
    uint32_t b[kAhead][ColTiles][8];
    typename Sums::Scales scales[kPerBlock ? kAhead : 1];
    const bool from_stage = staged != nullptr && kb0 == warp;
#pragma unroll
    for (int d = 0; d < kAhead; ++d) {
      const int kb = kb0 + kWarps * d;
      if (kb < full_blocks) {
#pragma unroll
        for (int nt = 0; nt < ColTiles; ++nt) {
          if (from_stage) {
            StagedRound<Cfg, Epi>::load_words(b[d][nt], staged, warp, d, nt, lane);
          } else {
            load_row32<From::kStream, false>(b[d][nt], b_row[nt], kb, t, p.k, stream);
          }
        }
        if constexpr (kPerBlock) scales[d].load(epi, m0, n0, p.m, p.n, lane, kb);
      }
    }
#pragma unroll
    for (int d = 0; d < kAhead; ++d) {
      const int kb = kb0 + kWarps * d;
      if (kb < full_blocks) compute(b[d], kb, std::false_type{}, scales[kPerBlock ? d : 0]);
    }
  }
  if (full_blocks * kBK < p.k && warp == full_blocks % kWarps) {
    uint32_t b[ColTiles][8];
    typename Sums::Scales scales;
#pragma unroll
    for (int nt = 0; nt < ColTiles; ++nt) load_row32<From::kStream, true>(b[nt], b_row[nt], full_blocks, t, p.k, stream);
    if constexpr (kPerBlock) scales.load(epi, m0, n0, p.m, p.n, lane, full_blocks);
    compute(b, full_blocks, std::true_type{}, scales);
  }
  ptx::griddep_launch_dependents();
  sums.store(p, epi, m0, n0);
}

// A persistent block's tiles of D against packed 4-bit B (WarpWork's order), B streamed through
// the warps' rings (Int4Stream, started by the caller), A as for skinny_tile (A in shared memory
// is x quantized by the block: at most kQuantizeRows rows). HalfRows: A has at most 8 rows (x
// quantized by the block always); OneRow: one row. Each K block's scales (group scales, per-block
// scales when promoting; L1 hits but for the first of 32 K blocks) are loaded before its B is
// waited for. BZero: B has zero points (p.b_zero_point), read with the scales. Slots: B's scales
// per 128 / Slots inputs (TileSums; GroupT their element), a tile of Cfg::kRows / Slots rows of D.
template <int RowTiles, int ColTiles, From ASrc, class Epi, bool HalfRows, bool OneRow, bool BZero, int Slots,
          class GroupT>
__device__ __forceinline__ void skinny_tiles_int4(const GemmProblem& p, const Epi& epi, const uint8_t* a_base,
                                                  int64_t a_stride, Int4Stream<TileConfig<RowTiles, ColTiles>>& b) {
  using Cfg = TileConfig<RowTiles, ColTiles>;
  static_assert(!HalfRows || RowTiles == 1, "HalfRows is one m16 tile");
  using Sums = TileSums<RowTiles, ColTiles, true, true, ASrc, Epi, true, HalfRows, OneRow, BZero, Slots, GroupT>;
  const WarpWork& work = b.work;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int full_blocks = p.k / kBK;
  WarpWork::Tile tile = work.first;
  // The tiles' sums go through two shared buffers in turn (TileSums::store): between the reads of
  // one tile's sums and the writes of the tile after next lies the next tile's barrier, so no
  // other is needed (one barrier per tile, not two: the warps wait for each other half as often).
  for (int parity = 0; work.has(tile); parity ^= 1) {
    const int m0 = tile.row * (Cfg::kRows / Slots), n0 = tile.col * Cfg::kCols;
    work.next(tile);  // from here on, the block's next tile
    if constexpr (!Epi::kPromotes) work.prefetch_group_scales(p, tile, Cfg::kCols);
    prefetch_cols<Cfg::kCols>(p, epi, n0);
    Sums sums;
    sums.start(p, a_base, a_stride, m0, g);
    // B's table per group: its int8 group scales, or (BZero, which has none: group scales 1)
    // its zero points.
    typename Sums::GroupRows table_rows;
    if constexpr (BZero) {
      table_rows.start(p.b_zero_point, p.b_zero_point_stride, p, n0, lane);
    } else {
      table_rows.start(p.b_group_scale, p.b_group_scale_stride, p, n0, lane);
    }
    typename Sums::Scales scales;
    typename Sums::Group group, zero;
    if constexpr (BZero) group = Sums::Group::all(1);
    // last_group: of B's scales per 128 / Slots inputs, which only the K tail's groups may pass.
    auto load_scales = [&](int kb, int last_group) {
      if constexpr (Epi::kPromotes) scales.load(epi, m0, n0, p.m, p.n, lane, kb, last_group);
      if constexpr (BZero) {
        zero = table_rows.load(kb, 0);
      } else {
        group = table_rows.load(kb, 1);
      }
    };
    for (int q = 0, kb = work.k_first; q < work.per_tile; ++q, kb += work.k_step) {
      load_scales(kb, INT_MAX);
      typename Sums::A a;
      sums.template load_a<false>(p, kb, t, a);
      uint32_t bw[ColTiles][4];
      b.read(bw);
      b.advance(p);
      sums.add(bw, a, scales, group, &zero);
    }
    if (full_blocks * kBK < p.k && work.k_first == full_blocks % work.k_step) {  // the K tail, from global memory
      const uint8_t* b_row[ColTiles];
      b_rows_of(p, n0, lane / 4, b_row);
      uint32_t bw[ColTiles][4];
#pragma unroll
      for (int nt = 0; nt < ColTiles; ++nt)
        load_packed16(bw[nt], b_row[nt], full_blocks, t, p.k / kInt4PerByte, ptx::l2_policy_evict_first());
      load_scales(full_blocks, ceil_div(p.k * Slots, kBK) - 1);
      typename Sums::A a;
      sums.template load_a<true>(p, full_blocks, t, a);
      sums.add(bw, a, scales, group, &zero);
    }
    if (!work.has(tile)) ptx::griddep_launch_dependents();
    sums.fold_slots();
    sums.template store<2>(p, epi, m0, n0, parity);
  }
  // No block leaves while another block of its cluster may still read its sums. A relaxed arrival:
  // it orders only those reads, whose values went into the block's stores before it; a release
  // would first wait for the stores of D to complete.
  if (cluster_split(p) > 1) {
    ptx::cluster_arrive_relaxed();
    ptx::cluster_wait_acquire();
  }
}

// RowTiles, ColTiles: those of the config (TileConfig<RowTiles, ColTiles>). XT: void for int8 A
// as given (p.a); else the XQuant of the float x that each block quantizes itself (xq,
// skinny_quantize.cuh; dynamic shared memory of QuantizedA's layout) before it takes its tiles
// (a persistent grid: x is quantized once per block). BInt4: B is packed 4-bit (p.b_int4), read
// by a persistent grid through the warps' rings (Int4Stream) across the block's tiles; int8 B
// is read by one block per tile unless x is quantized in the kernel. FewRows: 4-bit B against an
// int8 A given of at most FewRows rows, 8 or 1 (TileSums' HalfRows sums, as for x quantized in the
// kernel; OneRow for 1); 0: up to 16. BZero: 4-bit B with zero points (p.b_zero_point). Slots:
// 4-bit B with scales per 128 / Slots inputs of element GroupT (TileSums), FewRows then counting
// slot rows (Slots * M).
template <int RowTiles, int ColTiles, bool ASigned, bool BSigned, class Epi, class XT, bool BInt4,
          int FewRows = 0, bool BZero = false, int Slots = 1, class GroupT = float>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    skinny_gemm_kernel(const GemmProblem p, const Epi epi, const QuantizeParams xq) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Cfg = TileConfig<RowTiles, ColTiles>;
  constexpr bool kQuantizes = !std::is_void_v<XT>;
  // Dynamic shared memory: x quantized by the block (QuantizedA) if kQuantizes, then B's ring
  // (4-bit) or the first round of B (StagedRound, int8 B where the launcher gave it the room).
  extern __shared__ __align__(128) uint8_t smem[];
  // The block's first round of int8 B into L2, a row per thread. With an overlapped launch,
  // before griddep_wait and only in the first wave, the blocks that can run beside the kernel
  // before this one (later blocks find it finished, and their prefetch only added L2 traffic:
  // docs/design/decode.md).
  auto prefetch_first_round = [&] {
    if (threadIdx.x >= Cfg::kCols) return;
    const int n0 = static_cast<int>(blockIdx.x % ceil_div(p.n, Cfg::kCols)) * Cfg::kCols;
    const int bytes = min(p.k, kWarps * k_ahead<Cfg, Epi>() * kBK) & ~15;
    const int row = min(n0 + static_cast<int>(threadIdx.x), p.n - 1);
    if (bytes > 0)
      ptx::prefetch_l2_bulk(static_cast<const uint8_t*>(p.b.ptr) + row_offset(row, p.b.stride_row),
                            static_cast<uint32_t>(bytes));
  };
  if constexpr (BInt4) {
    // The rings' first copies hold no registers, so the main loop starts on B already on its way.
    // An int8 A given: they go out before griddep_wait, so with an overlapped launch they overlap
    // the tail of the kernel before, which is tcgemm's quantize of x: it lets this kernel start
    // only after its own griddep_wait, so whatever wrote B or its group scales before it has
    // finished (tests/test_quant_linear.py: a packed weight written just before the layer). H200,
    // bench_decode M = 16: 8B qkv 11.1 -> 10.0 us, 70B o 16.8 -> 15.5 us. x quantized in
    // the kernel: right after the loads of x, which would otherwise queue behind them (M = 1: 8B
    // gate+up 22.6 -> 23.4 us, 70B o 14.0 -> 14.7 us with the copies first).
    const QuantizedA layout = kQuantizes ? QuantizedA::layout(p.m, p.k, xq.granularity) : QuantizedA{0, 0, 0};
    Int4Stream<Cfg> b{smem + (kQuantizes ? b_smem_at(layout.bytes) : 0),
                      WarpWork::of_block(p, Cfg::kRows / Slots, Cfg::kCols)};
    // Where the kernel quantizes x, the first tile's group scales go with the rings' first copies
    // (skinny_tiles_int4 prefetches each next tile's as it starts one). With an int8 A given, not:
    // after griddep_wait they cost 8B down (K = 14336) at 16 rows 10% on an H100.
    auto start_b = [&] {
      b.start(p);
      if constexpr (!Epi::kPromotes) b.work.prefetch_group_scales(p, b.work.first, Cfg::kCols);
    };
    if constexpr (!kQuantizes) {
      b.start(p);
      ptx::griddep_wait();  // A, its scales and D belong to the kernels before this one
      skinny_tiles_int4<RowTiles, ColTiles, From::kCached, Epi, FewRows != 0, FewRows == 1, BZero, Slots, GroupT>(
          p, epi, static_cast<const uint8_t*>(p.a.ptr), p.a.stride_row, b);
    } else {
      ptx::griddep_wait();  // x and D belong to the kernels before this one
      const XShare share = XT::kInParts ? XShare{static_cast<int>(ptx::cluster_ctarank()), cluster_split(p)} : XShare{};
      quantize_a_to_shared<XT>(xq, smem, layout, share, start_b);
      const Epi in_block = epi.with_a_scales(reinterpret_cast<const float*>(smem + layout.scales_at));
      // x quantized in the kernel (at most kQuantizeRows rows) takes the HalfRows sums where its
      // slot rows fit them.
      static_assert(kQuantizeRows <= 8, "x quantized in the kernel takes the HalfRows sums");
      constexpr bool kHalfRows = RowTiles == 1 && kQuantizeRows * Slots <= 8;
      skinny_tiles_int4<RowTiles, ColTiles, From::kShared, Epi, kHalfRows, XT::kOneToken && Slots == 1, BZero, Slots,
                        GroupT>(
          p, in_block, smem, layout.row_stride, b);
    }
  } else {
    if (!kQuantizes && p.pdl && blockIdx.x < kBlocksPerSm * ptx::nsmid()) prefetch_first_round();
    ptx::griddep_wait();  // A (or x), the scales and D belong to the kernels before this one
    if constexpr (!kQuantizes) {
      skinny_tile<RowTiles, ColTiles, ASigned, BSigned, From::kCached, Epi>(
          p, epi, static_cast<const uint8_t*>(p.a.ptr), p.a.stride_row, static_cast<int>(blockIdx.x));
    } else {
      // The first tile's first round of B goes into shared memory while the block quantizes x
      // (where the launcher gave it the room, launch_quantizing), after the loads of x as above,
      // so the main loop starts on B already in the SM. Without the room, the round is prefetched
      // into L2 at the same point.
      using Staged = StagedRound<Cfg, Epi>;
      const QuantizedA layout = QuantizedA::layout(p.m, p.k, xq.granularity);
      uint8_t* staged =
          ptx::dynamic_smem_size() >= static_cast<uint32_t>(b_smem_at(layout.bytes) + Staged::kBytes)
              ? smem + b_smem_at(layout.bytes)
              : nullptr;
      auto stage_first_round = [&] {
        if (staged == nullptr) return prefetch_first_round();
        const uint8_t* b_row[ColTiles];
        const int n0 = static_cast<int>(blockIdx.x % ceil_div(p.n, Cfg::kCols)) * Cfg::kCols;
        b_rows_of(p, n0, threadIdx.x % 32 / 4, b_row);
        Staged::stage(staged, b_row, static_cast<int>(p.k / kBK));
      };
      quantize_a_to_shared<XT>(xq, smem, layout, XShare{}, stage_first_round);
      const Epi in_block = epi.with_a_scales(reinterpret_cast<const float*>(smem + layout.scales_at));
      const int tiles = ceil_div(p.m, Cfg::kRows) * ceil_div(p.n, Cfg::kCols);
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const bool first = tile == static_cast<int>(blockIdx.x);
        if (!first) __syncthreads();  // the last tile's sums have been read
        skinny_tile<RowTiles, ColTiles, ASigned, BSigned, From::kShared, Epi>(p, in_block, smem, layout.row_stride,
                                                                               tile, first ? staged : nullptr);
      }
    }
  }
#endif
}

// A grid of at most blocks_most blocks over the tiles of D (flattened into gridDim.x), in
// clusters of p.cluster_k_split blocks per tile (a whole number of clusters).
template <class Cfg, class Epi, bool ASigned, bool BSigned, class XT, bool BInt4, int FewRows = 0,
          bool BZero = false, int Slots = 1, class GroupT = float>
void launch_grid(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int64_t blocks_most, int smem_bytes) {
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, Cfg::kRows / Slots)) * ceil_div(p.n, Cfg::kCols);
  const int64_t split = p.cluster_k_split;
  if (split < 1 || (split > 1 && (!BInt4 || blocks_most < split)))
    throw std::logic_error("tcgemm: the skinny kernel splits K between cluster blocks for 4-bit B only");
  if (tiles * split >= (int64_t{1} << 31)) throw std::invalid_argument("tcgemm: the skinny GEMM's grid exceeds 2^31 blocks");
  const int64_t blocks = std::min(tiles * split, blocks_most / split * split);
  const auto kernel = skinny_gemm_kernel<Cfg::kRowTiles, Cfg::kColTiles, ASigned, BSigned, Epi, XT, BInt4, FewRows,
                                         BZero, Slots, GroupT>;
  tcgemm::launch_kernel_in_clusters(kernel, dim3(static_cast<unsigned>(blocks)), kThreads,
                                    static_cast<size_t>(smem_bytes), p.stream, p.pdl, static_cast<unsigned>(split), p,
                                    epi, xq);
}

// Whether XT quantizes one row of x in parts (XQuant's kInParts; void: x given as int8).
template <class XT>
constexpr bool x_in_parts() {
  if constexpr (std::is_void_v<XT>) {
    return false;
  } else {
    return XT::kInParts;
  }
}

template <class Cfg, class Epi, class XT, int XMost, int FewRows, bool BZero, int Slots, class GroupT = float>
void launch_int4_as(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int sm_count, int x_bytes) {
  if (!p.a.is_signed) throw std::logic_error("tcgemm: 4-bit B needs an int8 A");
  if (FewRows != 0 && int64_t{p.m} * Slots > FewRows)
    throw std::logic_error("tcgemm: the few-rows 4-bit kernel takes fewer rows");
  constexpr int kMost = b_smem_at(XMost) + Int4Ring<Cfg>::kBytes;
  if (x_bytes > XMost) throw std::logic_error("tcgemm: the skinny kernel's quantized x leaves no room for 4-bit B");
  allow_dynamic_smem<
      skinny_gemm_kernel<Cfg::kRowTiles, Cfg::kColTiles, true, true, Epi, XT, true, FewRows, BZero, Slots, GroupT>,
      kMost>();
  launch_grid<Cfg, Epi, true, true, XT, true, FewRows, BZero, Slots, GroupT>(
      p, epi, xq, int64_t{kBlocksPerSm} * sm_count, b_smem_at(x_bytes) + Int4Ring<Cfg>::kBytes);
}

// Scales per 128 / Slots inputs, built per element of their table (MmaSyncPromotion's GroupT).
template <class Cfg, class Epi, class XT, int XMost, int FewRows, int Slots>
void launch_int4_groups(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int sm_count, int x_bytes) {
  switch (epi.b_group_dtype()) {
    case ScaleDtype::kBf16:
      return launch_int4_as<Cfg, Epi, XT, XMost, FewRows, false, Slots, Bf16Bits>(p, epi, xq, sm_count, x_bytes);
    case ScaleDtype::kF16:
      return launch_int4_as<Cfg, Epi, XT, XMost, FewRows, false, Slots, F16Bits>(p, epi, xq, sm_count, x_bytes);
    case ScaleDtype::kF32:
      break;
  }
  launch_int4_as<Cfg, Epi, XT, XMost, FewRows, false, Slots>(p, epi, xq, sm_count, x_bytes);
}

// The persistent grid of a packed 4-bit B (signed A against signed 4-bit values): kBlocksPerSm
// blocks per SM, each with its rings after x_bytes of quantized x; the kernel that reads zero
// points or takes scales per 32 or 64 inputs (TileSums' slots) where B has them (promoting
// epilogues only: fp32 scales per K block or group).
template <class Cfg, class Epi, class XT, int XMost, int FewRows = 0>
void launch_int4(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int sm_count, int x_bytes) {
  if constexpr (Epi::kPromotes) {
    if (p.b_zero_point != nullptr && p.b_scale_groups != 1)
      throw std::logic_error("tcgemm: the skinny kernel reads 4-bit zero points with scales per 128 inputs only");
    if (p.b_zero_point != nullptr)
      return launch_int4_as<Cfg, Epi, XT, XMost, FewRows, true, 1>(p, epi, xq, sm_count, x_bytes);
    // x quantized in parts (a K split between cluster blocks) never meets per-block scales, nor
    // does one slot row (FewRows 1) meet slots.
    if constexpr (!x_in_parts<XT>() && FewRows != 1) {
      if (p.b_scale_groups == 2)
        return launch_int4_groups<Cfg, Epi, XT, XMost, FewRows, 2>(p, epi, xq, sm_count, x_bytes);
      if (p.b_scale_groups == 4)
        return launch_int4_groups<Cfg, Epi, XT, XMost, FewRows, 4>(p, epi, xq, sm_count, x_bytes);
    }
  } else if (p.b_zero_point != nullptr || p.b_scale_groups != 1) {
    throw std::logic_error("tcgemm: the skinny kernel reads 4-bit zero points and scales per 32 or 64 inputs with fp32 "
                           "scales per K block only");
  }
  if (p.b_scale_groups != 1) throw std::logic_error("tcgemm: 4-bit B's scales per group: 2 or 4 groups per K block");
  launch_int4_as<Cfg, Epi, XT, XMost, FewRows, false, 1>(p, epi, xq, sm_count, x_bytes);
}

template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count) {
  if (p.b_int4) {
    // Not instantiated for the config 4-bit B does not take (configs.h, Int4Rows16).
    // At most 8 rows of A (a K-heavy layer's int8 A at decode): the HalfRows sums, with the
    // weight as the mma's A operand (TileSums::kWeightRows); one row, OneRow.
    // Scales per 32 or 64 inputs count p.b_scale_groups slot rows per row (TileSums' Slots).
    const int64_t slot_rows = int64_t{p.m} * p.b_scale_groups;
    if constexpr (std::is_same_v<Cfg, Rows16Cols16>)
      throw std::logic_error("tcgemm: 4-bit B takes another skinny config");
    else if (Cfg::kRowTiles == 1 && slot_rows == 1)
      return launch_int4<Cfg, Epi, void, 0, Cfg::kRowTiles == 1 ? 1 : 0>(p, epi, QuantizeParams{}, sm_count, 0);
    else if (Cfg::kRowTiles == 1 && slot_rows <= 8)
      return launch_int4<Cfg, Epi, void, 0, Cfg::kRowTiles == 1 ? 8 : 0>(p, epi, QuantizeParams{}, sm_count, 0);
    else return launch_int4<Cfg, Epi, void, 0>(p, epi, QuantizeParams{}, sm_count, 0);
  }
  with_operand_signs<Epi>(p, [&](auto a_signed, auto b_signed) {
    launch_grid<Cfg, Epi, decltype(a_signed)::value, decltype(b_signed)::value, void, false>(
        p, epi, QuantizeParams{}, int64_t{1} << 31, 0);
  });
}

// launch_quantizing for x of XT (XQuant).
template <class Epi, class XT>
void launch_quantizing_as(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int sm_count, int smem_optin) {
  using Cfg = QuantizingInt8;
  using Staged = StagedRound<Cfg, Epi>;
  const QuantizedA x = QuantizedA::layout(p.m, p.k, xq.granularity);
  constexpr int kXMost = 48 * 1024;  // bytes of quantized x a block may hold
  if (!quantizes_in_kernel(xq, p.cluster_k_split) || xq.m != p.m || xq.k != p.k || x.bytes > kXMost)
    throw std::logic_error("tcgemm: the skinny kernel cannot quantize this x itself");
  // 4-bit B: x takes at most about 8.5 KB (quantizes_in_kernel), 16.5 KB in parts (a row of
  // 16384 values), its rings 48 KB.
  if constexpr (XT::kInParts) {
    launch_int4<Int4Rows16, Epi, XT, 20 * 1024>(p, epi, xq, sm_count, x.bytes);
  } else {
    if (p.b_int4) return launch_int4<Int4Rows16, Epi, XT, 16 * 1024>(p, epi, xq, sm_count, x.bytes);
    // The staged first round of B where kBlocksPerSm blocks still fit on an SM (not on GPUs with
    // about 100 KB of shared memory per SM); the kernel sees its room in %dynamic_smem_size.
    constexpr int kMost = b_smem_at(kXMost) + Staged::kBytes;
    const bool stage = kBlocksPerSm * kMost <= smem_optin;
    if (stage) allow_dynamic_smem<skinny_gemm_kernel<Cfg::kRowTiles, Cfg::kColTiles, true, true, Epi, XT, false>, kMost>();
    launch_grid<Cfg, Epi, true, true, XT, false>(p, epi, xq, int64_t{kBlocksPerSm} * sm_count,
                                                 stage ? b_smem_at(x.bytes) + Staged::kBytes : x.bytes);
  }
}

template <class Epi>
void launch_quantizing(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int sm_count, int smem_optin) {
  using T = typename Epi::OutT;  // tcgemm.quant_linear returns x's dtype
  if (one_token(xq) && p.b_int4 && XShare::of(0, p.cluster_k_split, xq.k / quantize_in_block::kVec<T>).split > 1)
    return launch_quantizing_as<Epi, XQuant<T, true, true>>(p, epi, xq, sm_count, smem_optin);
  if (one_token(xq))
    return launch_quantizing_as<Epi, XQuant<T, true>>(p, epi, xq, sm_count, smem_optin);
  launch_quantizing_as<Epi, XQuant<T, false>>(p, epi, xq, sm_count, smem_optin);
}

}  // namespace tcgemm::skinny

// The launchers of one tile config for every epilogue (one translation unit per config).
#define TCGEMM_SKINNY_INSTANTIATE_ONE(Epi, Cfg) \
  template void tcgemm::skinny::launch<Cfg, Epi>(const tcgemm::GemmProblem&, const Epi&, int);

namespace tcgemm::skinny {
// The launchers that quantize x in the kernel for each functor of Epis.
template <class... Epis>
constexpr auto quantizing_launchers(TypeList<Epis...>) {
  return std::make_tuple(&launch_quantizing<Epis>...);
}
}  // namespace tcgemm::skinny

// The launchers that quantize x in the kernel, for every functor of KernelQuantizingEpilogues
// (epilogue/epilogues.h): a type list, which explicit instantiations cannot spell, so a table of
// their addresses that is kept in the object instantiates them.
#define TCGEMM_SKINNY_INSTANTIATE_QUANTIZING()                             \
  [[gnu::used]] static constexpr auto tcgemm_skinny_quantizing_launchers = \
      tcgemm::skinny::quantizing_launchers(tcgemm::KernelQuantizingEpilogues{});

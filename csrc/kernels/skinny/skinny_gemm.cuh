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
//     prefetches: a later block starts after the kernel before it has finished.
//     After its main loop a block lets the next kernel be scheduled.
//   4-bit B (GemmProblem::b_int4, common/int4.h): a K block of a row is 64 bytes, a lane's share
//     one 16-byte load (16t) holding K 32t .. 32t + 31, so A's lane bytes follow (32t + 16v). At
//     k-step s the packed word s unpacks into the two B words the mma takes (times 16: the
//     nibbles shifted into the high half of their bytes). Each K block's int32 sums then lose the
//     factor 16 exactly (an arithmetic shift) and are added times the block's int8 group scale
//     (two-level scales: the sum over all of K equals that of the unpacked int8 weight, bit for
//     bit, since int32 arithmetic wraps) or promoted with per-block fp32 scales. Half the bytes
//     of B per K block: about twice as many K blocks in flight.
//   A quantized in the kernel (tcgemm.quant_linear at up to 4 rows, skinny_quantize.cuh): each
//     block of a persistent grid quantizes the float rows of x into shared memory once, then
//     takes its tiles reading A from there; the epilogue reads the block's scales.
#pragma once

#include <algorithm>
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
      uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (kv + i < k) w[i / 4] |= static_cast<uint32_t>(row[kv + i]) << (8 * (i % 4));
      x = make_uint4(w[0], w[1], w[2], w[3]);
    }
    put_piece(r, v, x);
  }
}

// Lane t's 16 bytes of K block kb of a packed 4-bit row (K 32t .. 32t + 31) as 4 words; masked:
// bytes at or past bytes = K / 2 read as zero.
template <bool Masked>
__device__ __forceinline__ void load_packed16(uint32_t (&r)[4], const uint8_t* row, int kb, int t, int64_t bytes,
                                              uint64_t policy) {
  const int64_t at = int64_t{kb} * b_block_bytes<true>() + 16 * t;
  uint4 x;
  if (!Masked || at + 16 <= bytes) {
    x = ptx::ld_global_stream_v4(row + at, policy);
  } else {
    uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if (at + i < bytes) w[i / 4] |= static_cast<uint32_t>(row[at + i]) << (8 * (i % 4));
    x = make_uint4(w[0], w[1], w[2], w[3]);
  }
  r[0] = x.x;
  r[1] = x.y;
  r[2] = x.z;
  r[3] = x.w;
}

// Lane t's share of K block kb of a row of B (k values): 8 words of int8, or 4 of packed 4-bit.
template <bool BInt4, bool Masked, int Words>
__device__ __forceinline__ void load_b(uint32_t (&r)[Words], const uint8_t* row, int kb, int t, int64_t k,
                                       uint64_t policy) {
  if constexpr (BInt4) {
    load_packed16<Masked>(r, row, kb, t, k / kInt4PerByte, policy);
  } else {
    load_row32<From::kStream, Masked>(r, row, kb, t, k, policy);
  }
}

// The int8 group scales (two-level 4-bit weights) of one K block for a lane's two columns of each
// n8 tile, packed four to a word (1 for every column when the problem has none).
template <int ColTiles>
struct Int4GroupScales {
  uint32_t words[(2 * ColTiles + 3) / 4];

  __device__ void load(const GemmProblem& p, int n0, int t, int kb) {
#pragma unroll
    for (int w = 0; w < (2 * ColTiles + 3) / 4; ++w) words[w] = 0x01010101u;
    if (p.b_group_scale == nullptr) return;
#pragma unroll
    for (int w = 0; w < (2 * ColTiles + 3) / 4; ++w) words[w] = 0;
#pragma unroll
    for (int nt = 0; nt < ColTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = min(n0 + 8 * nt + 2 * t + e, p.n - 1), i = 2 * nt + e;
        const int8_t s = __ldg(p.b_group_scale + int64_t{col} * p.b_group_scale_stride + kb);
        words[i / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(s)) << (8 * (i % 4));
      }
  }
  __device__ int32_t get(int nt, int e) const {
    const int i = 2 * nt + e;
    return static_cast<int8_t>(words[i / 4] >> (8 * (i % 4)));
  }
};

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

// K blocks of B a warp keeps in flight: kDepth, one fewer when promoting per-block scales (their
// registers). 4-bit B takes half the registers per K block: 2 kDepth - 1 (the group scales' word
// and the block's sums take the rest), kDepth when promoting.
template <class Cfg, class Epi, bool BInt4 = false>
constexpr int k_ahead() {
  if constexpr (BInt4) return Epi::kPromotes ? Cfg::kDepth : 2 * Cfg::kDepth - 1;
  return Epi::kPromotes && Cfg::kDepth > 1 ? Cfg::kDepth - 1 : Cfg::kDepth;
}

// The first round of B of a block's first tile, staged in shared memory by cp.async while the
// block quantizes x (a kernel that quantizes x itself): each lane's own 32 bytes per K block and
// n8 tile as two 16-byte pieces (lane_bytes), so that a lane waits only for its own copies; the
// warp's lanes are 16 bytes apart in each piece (no bank conflicts).
template <class Cfg, class Epi>
struct StagedRound {
  static constexpr int kBytes = kWarps * k_ahead<Cfg, Epi>() * Cfg::kColTiles * 2 * 32 * 16;
  __device__ static uint8_t* piece(uint8_t* base, int warp, int d, int nt, int v, int lane) {
    return base + ((((warp * k_ahead<Cfg, Epi>() + d) * Cfg::kColTiles + nt) * 2 + v) * 32 + lane) * 16;
  }
  // Where the staged round starts in a block's dynamic shared memory: after x_bytes of x
  // (QuantizedA).
  TCGEMM_HD static constexpr int at(int x_bytes) { return round_up(x_bytes, 128); }
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
  // A lane's words of one staged K block (int8 B only: 4-bit B is never staged).
  template <int Words>
  __device__ static void load_words(uint32_t (&r)[Words], uint8_t* base, int warp, int d, int nt, int lane) {
    if constexpr (Words == 8) {
#pragma unroll
      for (int v = 0; v < 2; ++v) put_piece(r, v, *reinterpret_cast<const uint4*>(piece(base, warp, d, nt, v, lane)));
    }
  }
};

// Tile `tile` of D, after griddep_wait: A's rows lie at a_base, a_stride bytes apart, in global
// memory (ASrc == From::kCached) or in shared memory (From::kShared, quantized by the block).
// Ends with the block's threads reading the shared sums: a block that goes on to another tile
// must pass a barrier first. staged: the tile's first round of B (StagedRound, this thread's
// copies not yet waited for), or nullptr.
template <int RowTiles, int ColTiles, bool ASigned, bool BSigned, From ASrc, class Epi, bool BInt4 = false>
__device__ __forceinline__ void skinny_tile(const GemmProblem& p, const Epi& epi, const uint8_t* a_base,
                                            int64_t a_stride, int tile, uint8_t* staged = nullptr) {
  using Cfg = TileConfig<RowTiles, ColTiles>;
  using Acc = typename Epi::Acc;  // int32, or fp32 when per-block scales are promoted
  constexpr bool kPerBlock = Epi::kPromotes;
  constexpr int kCols = Cfg::kCols;
  constexpr int kRegs = RowTiles * ColTiles * 4;  // accumulators per lane
  constexpr int kAhead = k_ahead<Cfg, Epi, BInt4>();
  constexpr int kBWords = BInt4 ? 4 : 8;  // registers of a lane's share of a K block of a B row
  __shared__ Acc partial[kWarps][kRegs][32];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int col_blocks = ceil_div(p.n, kCols);
  const int m0 = tile / col_blocks * 16 * RowTiles;
  const int n0 = tile % col_blocks * kCols;

  // This lane's rows (rows past the edges of A and B clamp: their results are computed and not
  // stored); of each K block it reads the bytes of lane_bytes(t, 0) and (t, 1).
  const uint8_t* a_row[RowTiles][2];
  const uint8_t* b_row[ColTiles];
#pragma unroll
  for (int mt = 0; mt < RowTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) a_row[mt][h] = a_base + row_offset(min(m0 + 16 * mt + g + 8 * h, p.m - 1), a_stride);
  b_rows_of(p, n0, g, b_row);
  const uint64_t stream = ptx::l2_policy_evict_first();

  int32_t acc[RowTiles][ColTiles][4];  // the whole K range, or one K block when promoting
  float accf[RowTiles][ColTiles][4];
  // f(mt, nt, j) for every accumulator register of the lane: m16 tile, n8 tile, fragment register.
  auto each_acc = [](auto&& f) {
#pragma unroll
    for (int mt = 0; mt < RowTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < ColTiles; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) f(mt, nt, j);
  };
  each_acc([&](int mt, int nt, int j) {
    acc[mt][nt][j] = 0;
    accf[mt][nt][j] = 0.0f;
  });

  // One K block: A loaded now (L1), B loaded ahead; promotion of its partial sums if per-block,
  // with the block's scales, which were loaded with B (a load of its own per K block, waited on
  // at once, stalled every K block for a trip to L2: docs/design/skinny.md). 4-bit B: the
  // block's sums on their own, then added times the group scales (or promoted), see the top.
  using Scales = MmaSyncPromotion<RowTiles, ColTiles>;
  using GroupScales = Int4GroupScales<ColTiles>;
  auto compute = [&](const uint32_t (&b)[ColTiles][kBWords], int kb, auto masked, const Scales& scales,
                     const GroupScales& group) {
    uint32_t a[RowTiles][2][8];
#pragma unroll
    for (int mt = 0; mt < RowTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        load_row32<ASrc, decltype(masked)::value, BInt4>(a[mt][h], a_row[mt][h], kb, t, p.k, 0);
    // The mma's accumulators: the whole K range's, or this block's alone (promoted or scaled after).
    constexpr bool kBlockSums = kPerBlock || BInt4;
    int32_t block[RowTiles][ColTiles][4];
    int32_t(*sums)[ColTiles][4] = kBlockSums ? block : acc;
    if constexpr (kBlockSums) each_acc([&](int mt, int nt, int j) { block[mt][nt][j] = 0; });
#pragma unroll
    for (int s = 0; s < kBK / 32; ++s)
#pragma unroll
      for (int mt = 0; mt < RowTiles; ++mt) {
        const uint32_t af[4] = {a[mt][0][2 * s], a[mt][1][2 * s], a[mt][0][2 * s + 1], a[mt][1][2 * s + 1]};
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
      each_acc([&](int mt, int nt, int j) { block[mt][nt][j] = wrap_mul(block[mt][nt][j] >> 4, group.get(nt, j % 2)); });
    if constexpr (kPerBlock) {
      scales.promote_into(accf, block);
    } else if constexpr (BInt4) {
      each_acc([&](int mt, int nt, int j) { acc[mt][nt][j] = wrap_add(acc[mt][nt][j], block[mt][nt][j]); });
    }
  };

  const int full_blocks = p.k / kBK;

  if (staged != nullptr) ptx::cp_async_wait<0>();
  for (int kb0 = warp; kb0 < full_blocks; kb0 += kWarps * kAhead) {
    uint32_t b[kAhead][ColTiles][kBWords];
    Scales scales[kPerBlock ? kAhead : 1];
    GroupScales group[BInt4 ? kAhead : 1];
    const bool from_stage = staged != nullptr && kb0 == warp;
#pragma unroll
    for (int d = 0; d < kAhead; ++d) {
      const int kb = kb0 + kWarps * d;
      if (kb < full_blocks) {
#pragma unroll
        for (int nt = 0; nt < ColTiles; ++nt) {
          if (!BInt4 && from_stage) {
            StagedRound<Cfg, Epi>::load_words(b[d][nt], staged, warp, d, nt, lane);
          } else {
            load_b<BInt4, false>(b[d][nt], b_row[nt], kb, t, p.k, stream);
          }
        }
        if constexpr (kPerBlock) scales[d].load(epi, m0, n0, p.m, p.n, lane, kb);
        if constexpr (BInt4) group[d].load(p, n0, t, kb);
      }
    }
#pragma unroll
    for (int d = 0; d < kAhead; ++d) {
      const int kb = kb0 + kWarps * d;
      if (kb < full_blocks)
        compute(b[d], kb, std::false_type{}, scales[kPerBlock ? d : 0], group[BInt4 ? d : 0]);
    }
  }
  if (full_blocks * kBK < p.k && warp == full_blocks % kWarps) {
    uint32_t b[ColTiles][kBWords];
    Scales scales;
    GroupScales group;
#pragma unroll
    for (int nt = 0; nt < ColTiles; ++nt) load_b<BInt4, true>(b[nt], b_row[nt], full_blocks, t, p.k, stream);
    if constexpr (kPerBlock) scales.load(epi, m0, n0, p.m, p.n, lane, full_blocks);
    if constexpr (BInt4) group.load(p, n0, t, full_blocks);
    compute(b, full_blocks, std::true_type{}, scales, group);
  }
  ptx::griddep_launch_dependents();

  each_acc([&](int mt, int nt, int j) {
    if constexpr (kPerBlock) {
      partial[warp][(mt * ColTiles + nt) * 4 + j][lane] = accf[mt][nt][j];
    } else {
      partial[warp][(mt * ColTiles + nt) * 4 + j][lane] = acc[mt][nt][j];
    }
  });
  __syncthreads();

  using Out = typename Epi::OutT;
  Out* d = static_cast<Out*>(p.d.ptr);
  for (int idx = threadIdx.x; idx < kRegs * 32; idx += kThreads) {
    const int i = idx / 32, l = idx % 32;
    Acc sum = partial[0][i][l];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      if constexpr (kPerBlock) {
        sum += partial[w][i][l];
      } else {
        sum = wrap_add(sum, partial[w][i][l]);
      }
    }
    const int mt = i / (ColTiles * 4), nt = (i / 4) % ColTiles, j = i % 4;
    const int row = m0 + 16 * mt + l / 4 + 8 * (j / 2);
    const int col = n0 + 8 * nt + 2 * (l % 4) + j % 2;
    if (row < p.m && col < p.n) d[static_cast<int64_t>(row) * p.d.ld + col] = epi.full(sum, epi.row(row), epi.col(col), row, col);
  }
}

// RowTiles, ColTiles: those of the config (TileConfig<RowTiles, ColTiles>). XT: void for int8 A
// as given (p.a), one block per tile; else the element type of the float x that each block
// quantizes itself (xq, skinny_quantize.cuh; dynamic shared memory of QuantizedA's layout) before
// it takes tiles blockIdx.x, + gridDim.x, ... (a persistent grid: x is quantized once per block).
// BInt4: B is packed 4-bit (p.b_int4).
template <int RowTiles, int ColTiles, bool ASigned, bool BSigned, class Epi, class XT, bool BInt4>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    skinny_gemm_kernel(const GemmProblem p, const Epi epi, const QuantizeParams xq) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Cfg = TileConfig<RowTiles, ColTiles>;
  constexpr bool kQuantizes = !std::is_void_v<XT>;
  // kQuantizes: x quantized by the block (QuantizedA), then the first round of B (StagedRound)
  extern __shared__ __align__(128) uint8_t quantized[];
  // The block's first round of B into L2, a row per thread. With an overlapped launch, before
  // griddep_wait and only in the first wave, the blocks that can run beside the kernel before
  // this one (later blocks find it finished, and their prefetch only added L2 traffic:
  // docs/design/decode.md).
  auto prefetch_first_round = [&] {
    if (threadIdx.x >= Cfg::kCols) return;
    const int n0 = static_cast<int>(blockIdx.x % ceil_div(p.n, Cfg::kCols)) * Cfg::kCols;
    const int row_bytes = BInt4 ? p.k / kInt4PerByte : p.k;
    const int bytes = min(row_bytes, kWarps * k_ahead<Cfg, Epi, BInt4>() * b_block_bytes<BInt4>()) & ~15;
    const int row = min(n0 + static_cast<int>(threadIdx.x), p.n - 1);
    if (bytes > 0)
      ptx::prefetch_l2_bulk(static_cast<const uint8_t*>(p.b.ptr) + row_offset(row, p.b.stride_row),
                            static_cast<uint32_t>(bytes));
  };
  if (!kQuantizes && p.pdl && blockIdx.x < kBlocksPerSm * ptx::nsmid()) prefetch_first_round();
  ptx::griddep_wait();  // A (or x), the scales and D belong to the kernels before this one
  if constexpr (!kQuantizes) {
    skinny_tile<RowTiles, ColTiles, ASigned, BSigned, From::kCached, Epi, BInt4>(
        p, epi, static_cast<const uint8_t*>(p.a.ptr), p.a.stride_row, static_cast<int>(blockIdx.x));
  } else {
    // The first tile's first round of B goes into shared memory while the block quantizes x
    // (where the launcher gave it the room, launch_quantizing): the copies are issued right
    // after the loads of x (issued first, they would queue behind them) and hold no registers,
    // so the main loop starts on B already in the SM. Without the room, the round is prefetched
    // into L2 at the same point (always for 4-bit B, whose round is half the bytes).
    using Staged = StagedRound<Cfg, Epi>;
    const QuantizedA layout = QuantizedA::layout(p.m, p.k, xq.granularity);
    uint8_t* staged =
        !BInt4 && ptx::dynamic_smem_size() >= static_cast<uint32_t>(Staged::at(layout.bytes) + Staged::kBytes)
            ? quantized + Staged::at(layout.bytes)
            : nullptr;
    auto stage_first_round = [&] {
      if (staged == nullptr) return prefetch_first_round();
      const uint8_t* b_row[ColTiles];
      b_rows_of(p, static_cast<int>(blockIdx.x % ceil_div(p.n, Cfg::kCols)) * Cfg::kCols, threadIdx.x % 32 / 4, b_row);
      Staged::stage(staged, b_row, static_cast<int>(p.k / kBK));
    };
    quantize_a_to_shared<XT>(xq, quantized, layout, stage_first_round);
    const Epi in_block = epi.with_a_scales(reinterpret_cast<const float*>(quantized + layout.scales_at));
    const int tiles = ceil_div(p.m, Cfg::kRows) * ceil_div(p.n, Cfg::kCols);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const bool first = tile == static_cast<int>(blockIdx.x);
      if (!first) __syncthreads();  // the last tile's sums have been read
      skinny_tile<RowTiles, ColTiles, ASigned, BSigned, From::kShared, Epi, BInt4>(
          p, in_block, quantized, layout.row_stride, tile, first ? staged : nullptr);
    }
  }
#endif
}

// A grid of at most blocks_most blocks over the tiles of D (flattened into gridDim.x).
template <class Cfg, class Epi, bool ASigned, bool BSigned, class XT, bool BInt4>
void launch_grid(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int64_t blocks_most, int smem_bytes) {
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, Cfg::kRows)) * ceil_div(p.n, Cfg::kCols);
  if (tiles >= (int64_t{1} << 31)) throw std::invalid_argument("tcgemm: the skinny GEMM's grid exceeds 2^31 blocks");
  tcgemm::launch_kernel(skinny_gemm_kernel<Cfg::kRowTiles, Cfg::kColTiles, ASigned, BSigned, Epi, XT, BInt4>,
                        dim3(static_cast<unsigned>(std::min(tiles, blocks_most))), kThreads,
                        static_cast<size_t>(smem_bytes), p.stream, p.pdl, p, epi, xq);
}

// f(bool_constant<B is packed 4-bit>).
template <class F>
void with_b_format(const GemmProblem& p, F&& f) {
  if (p.b_int4) return f(std::true_type{});
  f(std::false_type{});
}

template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi) {
  with_b_format(p, [&](auto b_int4) {
    if constexpr (decltype(b_int4)::value) {  // signed A against signed 4-bit values
      if (!p.a.is_signed) throw std::logic_error("tcgemm: 4-bit B needs an int8 A");
      launch_grid<Cfg, Epi, true, true, void, true>(p, epi, QuantizeParams{}, int64_t{1} << 31, 0);
    } else {
      with_operand_signs<Epi>(p, [&](auto a_signed, auto b_signed) {
        launch_grid<Cfg, Epi, decltype(a_signed)::value, decltype(b_signed)::value, void, false>(
            p, epi, QuantizeParams{}, int64_t{1} << 31, 0);
      });
    }
  });
}

template <class Cfg, class Epi>
void launch_quantizing(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int sm_count, int smem_optin) {
  using XT = typename Epi::OutT;  // tcgemm.quant_linear returns x's dtype
  using Staged = StagedRound<Cfg, Epi>;
  const QuantizedA x = QuantizedA::layout(p.m, p.k, xq.granularity);
  constexpr int kXMost = 48 * 1024;  // bytes of quantized x a block may hold
  if (!quantizes_in_kernel(xq) || xq.m != p.m || xq.k != p.k || x.bytes > kXMost)
    throw std::logic_error("tcgemm: the skinny kernel cannot quantize this x itself");
  // The staged first round of B where kBlocksPerSm blocks still fit on an SM (not on GPUs with
  // about 100 KB of shared memory per SM); the kernel sees its room in %dynamic_smem_size.
  constexpr int kMost = Staged::at(kXMost) + Staged::kBytes;
  const int staged = Staged::at(x.bytes) + Staged::kBytes;
  const bool stage = kBlocksPerSm * kMost <= smem_optin && !p.b_int4;
  with_b_format(p, [&](auto b_int4) {
    constexpr bool kInt4 = decltype(b_int4)::value;
    if (stage) allow_dynamic_smem<skinny_gemm_kernel<Cfg::kRowTiles, Cfg::kColTiles, true, true, Epi, XT, kInt4>, kMost>();
    launch_grid<Cfg, Epi, true, true, XT, kInt4>(p, epi, xq, int64_t{kBlocksPerSm} * sm_count, stage ? staged : x.bytes);
  });
}

}  // namespace tcgemm::skinny

// The launchers of one tile config for every epilogue (one translation unit per config).
#define TCGEMM_SKINNY_INSTANTIATE_ONE(Epi, Cfg) \
  template void tcgemm::skinny::launch<Cfg, Epi>(const tcgemm::GemmProblem&, const Epi&);

namespace tcgemm::skinny {
// The launchers that quantize x in the kernel for config Cfg and each functor of Epis.
template <class Cfg, class... Epis>
constexpr auto quantizing_launchers(TypeList<Epis...>) {
  return std::make_tuple(&launch_quantizing<Cfg, Epis>...);
}
}  // namespace tcgemm::skinny

// The launchers that quantize x in the kernel, for config Cfg and every functor of
// KernelQuantizingEpilogues (epilogue/epilogues.h): a type list, which explicit instantiations
// cannot spell, so a table of their addresses that is kept in the object instantiates them.
#define TCGEMM_SKINNY_INSTANTIATE_QUANTIZING(Cfg)                          \
  [[gnu::used]] static constexpr auto tcgemm_skinny_quantizing_launchers = \
      tcgemm::skinny::quantizing_launchers<Cfg>(tcgemm::KernelQuantizingEpilogues{});

// The W4 kernel: W4A8 at 17-512 rows of x on Hopper, with the packed 4-bit weight as wgmma's
// register operand A and x as its shared-memory operand B, so that D^T = W x^T comes out of the
// tensor cores with the weight never written back to shared memory as int8.
//
//   * Tiles: kBN weight rows (64 per consumer warpgroup) by kRowsM rows of x (wgmma N), all of K
//     or, in clusters of `split` blocks, a share of its K blocks each (W4Params::kb_per_split).
//   * Producer warpgroup: thread 0 has TMA bring each K block's x tile ([kRowsM][128], 128-byte
//     swizzle) and the weight's packed rows ([kBN][64], as stored) into a ring slot. The
//     consumers first read the tile's group scales of all the block's K blocks into shared
//     memory (w4_load_group_scales_v16), while the ring fills. The first round's weight copies go
//     out before griddep_wait (an overlapped launch after the kernel that writes x), x's after it;
//     later, with rings of 6 stages or more, two K blocks' copies at a time (Cfg::kLoadGroup).
//   * x is in the W4 K order (common/int4.h: the W4 K order; GemmProblem::a_w4_order): within a
//     K block, thread t of a quad reads the 16 packed bytes of K 32t .. 32t + 31 of each of its
//     two weight rows (one shared load each, no bank conflicts), and packed word s unpacked even /
//     odd is the A fragment of k-step s, as uint8 q * s + 128 (five instructions per eight values;
//     the epilogue subtracts 128 times x's row sums, which the pass that orders x writes).
//   * Per K block a thread issues four wgmma from one of two register sets of A, waits for the
//     four of the K block before (which read the other set) and hands its ring slot back, then
//     unpacks the next K block's 64 values into the other set while its four run.
//   * fp32 weight scales per K block (Epi::kPromotes, the W4A8 layers with float group scales):
//     the weight is unpacked as signed q * 16 (common/int4.h: unpack_int4x8_times16, three
//     instructions per eight values), each K block's wgmma start a fresh int32 set (two sets, in
//     turn), and once a K block's wgmma retire its exact sums are promoted into fp32 accumulators
//     with scale_a(m, kb) * scale_b(n, kb) / 16 (the 16 taken out exactly), while the next K
//     block's run. The weight scales of the block's K blocks come into shared memory first, as
//     the two-level group scales do.
//   * Epilogue: each thread's sums are D^T's (weight row n, x row m) pairs; they go to shared
//     memory as the tile of D, from which the consumer warps apply the epilogue functor and store
//     whole rows of D. With a K split, block r of the cluster adds every block's tile (in rank
//     order, through distributed shared memory) for the rows r, r + split, ...
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include <cuda.h>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "common/launch_kernel.cuh"
#include "common/math.h"
#include "common/problem.h"
#include "epilogue/chunk_cols.cuh"
#include "epilogue/epilogues.h"
#include "kernels/sm90/configs.h"
#include "kernels/sm90/sm90_scheduler.cuh"
#include "kernels/sm90/sm90_tensor_map.h"
#include "kernels/sm90/sm90_w4.h"
#include "ptx/cache_policy.cuh"
#include "ptx/cluster.cuh"
#include "ptx/griddep.cuh"
#include "ptx/ld_global.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace tcgemm::sm90 {

struct W4Params {
  int m, n;
  int k_blocks;       // K / 128
  int kb_per_split;   // K blocks per block of a cluster (the last may have fewer, none is empty)
  int x_box_rows;     // rows of x a stage loads: kRowsM, or M rounded up to 8 when M < kRowsM
  void* d;            // [M, N] of the epilogue's OutT, unit stride along N
  int64_t ldd;
  const int32_t* a_rowsum;    // x's row sums over K: the uint8 weight q * s + 128 adds 128 times them
  const int8_t* group_scale;  // [N, K / 128], rows group_scale_stride apart; or null (every scale 1)
  int64_t group_scale_stride;
  int scale_pitch;            // scales (bytes, or fp32 when promoting) between the rows of the block's
                              // group scales in shared memory
};

// The factor the weight's unpacking as q * 16 puts on every int32 sum, and its exact inverse.
constexpr float kW4Times16Unscale = 1.0f / 16.0f;

// The named barrier of the consumer warpgroups: their group scales loaded, and later, with a K
// split, every warpgroup past the ring before their sums overwrite it.
constexpr int kW4ConsumersBarrier = 1;

// The tile's scales of the block's K blocks into shared memory (`scales`: row r's at
// r * pitch + kb - kb_begin; value(r, kb) gives them, for r past N too), by threads `thread` of
// `threads`, 16 loads in flight each: read once at the start, while the first K blocks' copies
// are on their way, rather than per K block on the main loop's chain.
template <class Cfg, class T, class Value>
__device__ __forceinline__ void w4_load_block_scales(const Value& value, int kb_count, int pitch, T* scales,
                                                     int thread, int threads) {
  constexpr int kInFlight = 16;
  const int total = Cfg::kBN * kb_count;
  for (int first = thread; first < total; first += kInFlight * threads) {
    T v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * threads, r = i / kb_count, kb = i - r * kb_count;
      v[j] = i < total ? value(r, kb) : T{};
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * threads, r = i / kb_count, kb = i - r * kb_count;
      if (i < total) scales[r * pitch + kb] = v[j];
    }
  }
}

// The tile's int8 group scales of the block's K blocks into shared memory as w4_load_block_scales
// puts them, for a group scale tensor whose base and row stride are multiples of 16 bytes: in
// 16-byte pieces of each row (the bytes of a piece outside the block's K blocks are not stored),
// all of a thread's pieces in flight at once. Rows past N take scale 1. Byte loads of the same
// scales took one memory round trip per 16 bytes a thread (14 KiB a block at 70B down, 32 rows:
// four round trips before the first K block, about 12% of the layer; docs/design/int4.md).
template <class Cfg>
__device__ __forceinline__ void w4_load_group_scales_v16(const int8_t* group_scale, int64_t stride, int n, int row0,
                                                         int kb_begin, int kb_count, int pitch, uint8_t* scales,
                                                         int thread, int threads) {
  constexpr int kInFlight = 4;
  const int c_begin = kb_begin / 16, chunks = ceil_div(kb_begin + kb_count, 16) - c_begin;
  const int total = Cfg::kBN * chunks;
  for (int first = thread; first < total; first += kInFlight * threads) {
    uint4 v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * threads, r = i / chunks, c = c_begin + i - r * chunks;
      v[j] = make_uint4(0x01010101u, 0x01010101u, 0x01010101u, 0x01010101u);
      if (i < total && row0 + r < n)
        v[j] = ptx::ld_global_nc_v4(group_scale + static_cast<int64_t>(row0 + r) * stride + 16 * c);
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * threads, r = i / chunks, c = c_begin + i - r * chunks;
      if (i >= total) continue;
      const uint32_t words[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
      for (int b = 0; b < 16; ++b) {
        const int kb = 16 * c + b - kb_begin;
        if (kb >= 0 && kb < kb_count) scales[r * pitch + kb] = static_cast<uint8_t>(words[b / 4] >> (8 * (b % 4)));
      }
    }
  }
}

// Promotion: x's scales of K block kb for a consumer thread's rows of x (thread t of its quad:
// rows m0 + 8j + 2t + e, e = 0, 1, at 2j + e; rows past M read the last row's).
template <class Cfg, class Epi>
__device__ __forceinline__ void w4_a_scales(const Epi& epi, int m0, int m, int t, int kb,
                                            float (&out)[Cfg::kAccRegs / 2]) {
#pragma unroll
  for (int j = 0; j < Cfg::kAccRegs / 4; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) out[2 * j + e] = epi.a_block_scale(min(m0 + 8 * j + 2 * t + e, m - 1), kb);
}

// Whether x's scales change with the K block (activations per block of 128) rather than being one
// per row (per token: then read once, before the main loop).
template <class Epi>
__device__ __forceinline__ bool w4_a_scales_by_block(const Epi& epi) {
  return epi.a_block_scales(0).stride_kb != 0;
}

template <class Cfg, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kBlocksPerSM)
    sm90_w4_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                   const W4Params args, const Epi epi) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kPromotes = Epi::kPromotes;  // fp32 scales per K block
  using Mma = ptx::WgmmaInt8RegA<Cfg::kRowsM, true, /*ASigned=*/kPromotes>;
  using Scale = std::conditional_t<kPromotes, float, uint8_t>;  // the block scales kept in shared memory
  constexpr int kStages = Cfg::kStages;
  constexpr int kRegs = Cfg::kAccRegs;
  constexpr int kAccSets = kPromotes ? 2 : 1;  // int32 sets: one per K block in turn when promoting

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(round_up<uintptr_t>(reinterpret_cast<uintptr_t>(smem_raw), 1024));
  uint8_t* x_tiles = smem;                                  // kStages x [kRowsM][128], swizzled
  uint8_t* w_tiles = smem + kStages * Cfg::kXTileBytes;     // kStages x [kBN][64], packed
  uint64_t* full = reinterpret_cast<uint64_t*>(w_tiles + kStages * Cfg::kWTileBytes);
  uint64_t* empty = full + kStages;
  Scale* scales = reinterpret_cast<Scale*>(empty + kStages);  // [kBN][scale_pitch]: the block's K blocks

  const int split = static_cast<int>(gridDim.x);  // the cluster's blocks share the tile's K blocks
  const int rank = static_cast<int>(blockIdx.x);
  const int row0 = blockIdx.y * Cfg::kBN;         // the tile's first weight row (column of D)
  const int m0 = blockIdx.z * Cfg::kRowsM;        // and first row of x (row of D)
  const int kb_begin = rank * args.kb_per_split;
  const int kb_end = min(args.k_blocks, kb_begin + args.kb_per_split);
  const bool scaled = kPromotes || args.group_scale != nullptr;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], 4 * Cfg::kWgs);  // one arrival per consumer warp
    }
    ptx::mbarrier_fence_init();
    ptx::tma_prefetch_descriptor(&map_x);
    ptx::tma_prefetch_descriptor(&map_w);
  }
  __syncthreads();

  if (threadIdx.x / 128 == 0) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      // x's tile is read again by every weight tile: kept in L2; the weight is read once.
      const uint64_t keep = ptx::l2_policy_evict_last(), stream = ptx::l2_policy_evict_first();
      const uint32_t stage_bytes = args.x_box_rows * Cfg::kBK + Cfg::kWTileBytes;
      // The weight's copies of the ring's first round go out before griddep_wait: with an
      // overlapped launch they stream while the kernels before this one (x's quantization and
      // ordering) finish; x's copies follow once those have.
      const int first = min(kStages, kb_end - kb_begin);
      RingPosition<kStages> ring;
      for (int j = 0; j < first; ++j, ring.advance()) {
        ptx::mbarrier_arrive_expect_tx(&full[ring.slot], stage_bytes);
        ptx::tma_load_2d(w_tiles + ring.slot * Cfg::kWTileBytes, &map_w, &full[ring.slot],
                         (kb_begin + j) * Cfg::kBK / 2, row0, stream);
      }
      ptx::griddep_wait();
      ring = RingPosition<kStages>{};
      for (int j = 0; j < first; ++j, ring.advance())
        ptx::tma_load_2d(x_tiles + ring.slot * Cfg::kXTileBytes, &map_x, &full[ring.slot], (kb_begin + j) * Cfg::kBK,
                         m0, keep);
      // Then `group` K blocks at a time: their slots waited for together, the weight's copies
      // issued back to back (both 64-byte halves of a weight row's 128 bytes at once), then x's.
      constexpr int group = Cfg::kLoadGroup;
      for (int kb0 = kb_begin + first; kb0 < kb_end; kb0 += group) {
        const int n = min(group, kb_end - kb0);
        RingPosition<kStages> r = ring;
        for (int j = 0; j < n; ++j, r.advance()) ptx::mbarrier_wait(&empty[r.slot], r.phase ^ 1);
        r = ring;
        for (int j = 0; j < n; ++j, r.advance()) {
          ptx::mbarrier_arrive_expect_tx(&full[r.slot], stage_bytes);
          ptx::tma_load_2d(w_tiles + r.slot * Cfg::kWTileBytes, &map_w, &full[r.slot], (kb0 + j) * Cfg::kBK / 2, row0,
                           stream);
        }
        for (int j = 0; j < n; ++j, ring.advance())
          ptx::tma_load_2d(x_tiles + ring.slot * Cfg::kXTileBytes, &map_x, &full[ring.slot], (kb0 + j) * Cfg::kBK, m0,
                           keep);
      }
    }
    if (split > 1) {  // the consumers' two cluster barriers (below): every thread of the block takes part
      ptx::cluster_sync();
      ptx::cluster_sync();
    }
    return;
  }
  ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
  if (scaled) {
    const int kb_count = kb_end - kb_begin, thread = threadIdx.x - 128;
    if constexpr (kPromotes) {  // scale_b(n, kb): 1 where the epilogue applies it (per channel)
      w4_load_block_scales<Cfg>(
          [&](int r, int kb) { return epi.b_block_scale(min(row0 + r, args.n - 1), kb_begin + kb); }, kb_count,
          args.scale_pitch, scales, thread, Cfg::kConsumerThreads);
    } else if ((reinterpret_cast<uintptr_t>(args.group_scale) | static_cast<uintptr_t>(args.group_scale_stride)) % 16 ==
               0) {
      w4_load_group_scales_v16<Cfg>(args.group_scale, args.group_scale_stride, args.n, row0, kb_begin, kb_count,
                                    args.scale_pitch, scales, thread, Cfg::kConsumerThreads);
    } else {
      w4_load_block_scales<Cfg>(
          [&](int r, int kb) {
            return row0 + r < args.n
                       ? static_cast<uint8_t>(
                             args.group_scale[static_cast<int64_t>(row0 + r) * args.group_scale_stride + kb_begin + kb])
                       : uint8_t{1};
          },
          kb_count, args.scale_pitch, scales, thread, Cfg::kConsumerThreads);
    }
    ptx::named_barrier_sync(kW4ConsumersBarrier, Cfg::kConsumerThreads);
  }

  ptx::griddep_wait();  // x's scales and row sums, and D, belong to the kernels before this one
  const int c = static_cast<int>(threadIdx.x) - 128;  // consumer thread
  const int wg = c / 128, warp = (c / 32) % 4, lane = c % 32;
  const int g = lane / 4, t = lane % 4;
  const int r_lo = wg * 64 + warp * 16 + g;  // the thread's weight rows in the tile: r_lo, r_lo + 8
  const uint32_t w0 = ptx::smem_addr(w_tiles), s0 = ptx::smem_addr(scales);
  const uint64_t desc_x0 = ptx::wgmma_desc_k_major_sw128(x_tiles);

  // acc[set][4j + 2h + e]: weight row r_lo + 8h (column of D), x row 8j + 2t + e (row of D).
  // Left unset: every K block's first wgmma (or the first K block's, without promotion) starts
  // from zero. Setting them, ptxas may sink the stores among the wgmma and serialize them (C7515).
  int32_t acc[kAccSets][kRegs];
  float accf[kPromotes ? kRegs : 1];  // the promoted sums
#pragma unroll
  for (int i = 0; i < (kPromotes ? kRegs : 1); ++i) accf[i] = 0.0f;
  constexpr int kSets = 2;
  uint32_t a[kSets][4][4];  // register sets of A: [set][k-step][fragment register]

  // K block kb (landed in `slot`) read and unpacked into register set Set.
  auto unpack = [&](auto set, int slot, int kb) {
    constexpr int Set = decltype(set)::value;
    const uint32_t w = w0 + slot * Cfg::kWTileBytes + 16 * t;
    const int4 lo = ptx::ld_shared_v4(w + r_lo * (Cfg::kBK / 2));
    const int4 hi = ptx::ld_shared_v4(w + (r_lo + 8) * (Cfg::kBK / 2));
    const uint32_t words_lo[4] = {static_cast<uint32_t>(lo.x), static_cast<uint32_t>(lo.y),
                                  static_cast<uint32_t>(lo.z), static_cast<uint32_t>(lo.w)};
    const uint32_t words_hi[4] = {static_cast<uint32_t>(hi.x), static_cast<uint32_t>(hi.y),
                                  static_cast<uint32_t>(hi.z), static_cast<uint32_t>(hi.w)};
    if constexpr (kPromotes) {
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        unpack_int4x8_times16(words_lo[s], a[Set][s][0], a[Set][s][2]);
        unpack_int4x8_times16(words_hi[s], a[Set][s][1], a[Set][s][3]);
      }
    } else {
      uint32_t s_lo = 1, s_hi = 1;
      if (scaled) {
        const uint32_t at = s0 + r_lo * args.scale_pitch + kb - kb_begin;
        s_lo = ptx::ld_shared_u8(at);
        s_hi = ptx::ld_shared_u8(at + 8 * args.scale_pitch);
      }
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        unpack_int4x8_scaled_even_odd_biased(words_lo[s], s_lo, a[Set][s][0], a[Set][s][2]);
        unpack_int4x8_scaled_even_odd_biased(words_hi[s], s_hi, a[Set][s][1], a[Set][s][3]);
      }
    }
  };
  // The four wgmma of K block `slot` from register set Set, into int32 set Set when promoting
  // (fresh sums per K block), else added to the one set.
  auto issue = [&](auto set, int slot, bool accumulate) {
    constexpr int Set = decltype(set)::value;
    constexpr int AccSet = kPromotes ? Set : 0;
    ptx::wgmma_fence();
    const uint64_t desc = ptx::wgmma_desc_advance(desc_x0, slot * Cfg::kXTileBytes);
#pragma unroll
    for (int s = 0; s < 4; ++s)
      Mma::mma(a[Set][s], ptx::wgmma_desc_advance(desc, s * Cfg::kMmaK), acc[AccSet],
               (!kPromotes && accumulate) || s > 0);
    ptx::wgmma_commit_group();
  };
  // Promotion (kPromotes): K block kb's int32 set Set folded into accf with x's scales of kb
  // (a_scales: w4_a_scales, read once for x per token) and the weight rows' scales of kb.
  float a_scales[kPromotes ? kRegs / 2 : 1];
  auto promote_block = [&](auto set, int kb) {
    constexpr int Set = decltype(set)::value;
    const uint32_t at = s0 + 4 * (r_lo * args.scale_pitch + kb - kb_begin);
    const float b_scales[2] = {ptx::ld_shared_f32(at) * kW4Times16Unscale,
                               ptx::ld_shared_f32(at + 4 * 8 * args.scale_pitch) * kW4Times16Unscale};
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int j = i / 4, h = (i / 2) % 2, e = i % 2;
      accf[i] = promote(accf[i], acc[Set][i], a_scales[2 * j + e] * b_scales[h]);
    }
  };
  RingPosition<kStages> ring, retire;  // the next K block to issue; the oldest one not handed back
  auto hand_back = [&](auto before) {  // the K block before has retired: its A set is free, its slot goes back
    ptx::wgmma_fence_operands(a[decltype(before)::value]);
    if (lane == 0) ptx::mbarrier_arrive(&empty[retire.slot]);
    retire.advance();
  };
  auto unpack_next = [&](auto set, int kb) {  // K block kb + 1, if any, into the other set
    if (kb + 1 < kb_end) {
      ptx::mbarrier_wait(&full[ring.slot], ring.phase);
      unpack(std::integral_constant<int, (decltype(set)::value + 1) % kSets>{}, ring.slot, kb + 1);
    }
  };
  ptx::mbarrier_wait(&full[ring.slot], ring.phase);
  unpack(std::integral_constant<int, 0>{}, ring.slot, kb_begin);
  if constexpr (!kPromotes) {
    // K block kb from set Set: its wgmma issued, then the wgmma of the K block before retire and
    // its slot goes back, and the next K block is unpacked into the other set while kb's run. A
    // set is written only once no pending wgmma reads it: with two sets (and a wait for all before
    // the next K block's unpacking) the tensor cores drained every K block; writing a set that a
    // pending wgmma reads makes ptxas serialize every wgmma (warning C7513).
    auto step = [&](auto set, int kb) {
      constexpr int Set = decltype(set)::value;
      issue(set, ring.slot, kb > kb_begin);
      ring.advance();
      if (kb > kb_begin) {
        ptx::wgmma_wait_group<1>(acc);
        hand_back(std::integral_constant<int, (Set + kSets - 1) % kSets>{});
      }
      unpack_next(set, kb);
    };
    for (int kb = kb_begin; kb < kb_end; kb += kSets) {
      step(std::integral_constant<int, 0>{}, kb);
      if (kb + 1 < kb_end) step(std::integral_constant<int, 1>{}, kb + 1);
    }
    ptx::wgmma_wait_group<0>(acc);
  } else {
    // Promoting, K block kb (kb > kb_begin) from set Set: the K block before retires first (a
    // wait for all, as the per-block main loop does: reading its sums between issuing kb and a
    // wait_group 1 makes ptxas serialize every wgmma, C7514), kb's wgmma are issued into int32
    // set Set, and while they run the K block before is promoted and the next one unpacked. The
    // branch on M (never false) keeps the promotion out of the wgmma's basic block (per-block
    // main loop: ptxas otherwise schedules it between them).
    const bool a_by_block = w4_a_scales_by_block(epi);
    w4_a_scales<Cfg>(epi, m0, args.m, t, kb_begin, a_scales);
    auto step = [&](auto set, int kb) {
      constexpr int Set = decltype(set)::value, Before = (Set + kSets - 1) % kSets;
      if (a_by_block) w4_a_scales<Cfg>(epi, m0, args.m, t, kb - 1, a_scales);
      ptx::wgmma_wait_group<0>(acc);
      hand_back(std::integral_constant<int, Before>{});
      issue(set, ring.slot, false);
      ring.advance();
      if (args.m > 0) promote_block(std::integral_constant<int, Before>{}, kb - 1);
      unpack_next(set, kb);
    };
    issue(std::integral_constant<int, 0>{}, ring.slot, false);
    ring.advance();
    unpack_next(std::integral_constant<int, 0>{}, kb_begin);
    for (int kb = kb_begin + 1; kb < kb_end; kb += kSets) {
      step(std::integral_constant<int, 1>{}, kb);
      if (kb + 1 == kb_end) break;
      step(std::integral_constant<int, 0>{}, kb + 1);
    }
    if (a_by_block) w4_a_scales<Cfg>(epi, m0, args.m, t, kb_end - 1, a_scales);
    ptx::wgmma_wait_group<0>(acc);
    if ((kb_end - kb_begin) % kSets == 0) {  // the last K block: in set 1, or 0
      promote_block(std::integral_constant<int, 1>{}, kb_end - 1);
    } else {
      promote_block(std::integral_constant<int, 0>{}, kb_end - 1);
    }
  }
  // The epilogue. The sums go to shared memory as the tile of D ([kRowsM][kTilePitch] int32 or
  // fp32, over the ring, which every warpgroup is past): acc[4j + 2h + e] is weight row r_lo + 8h
  // (column of D), x row 8j + 2t + e; a pitch of 4 words past a multiple of 32 puts a warp's
  // stores in 32 distinct banks. Then warp w of the consumers takes the tile's rows w, w + 8, ...,
  // each lane the columns lane, lane + 32, ...: one pass of compact code (fully unrolled per
  // register it would be fetched once and run once, bound by instruction fetch), stores of whole
  // rows of D, and with a K split the cluster's tiles added in rank order, block r taking the rows
  // r, r + split, ... Each row waits on memory once: its terms (x's scale, row sum) come from one
  // round of loads for all of the warp's rows, lane i holding the i-th row's, and every block's
  // sums of the row's columns are loaded before any is used. Waiting per row for its terms in
  // global memory and per column and block for a sum in distributed shared memory cost a block
  // microseconds after its main loop (docs/design/int4.md: the W4 kernel's epilogue).
  constexpr int kPitch = Cfg::kTilePitch;
  const uint32_t tile = ptx::smem_addr(smem);
  ptx::named_barrier_sync(kW4ConsumersBarrier, Cfg::kConsumerThreads);
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int j = i / 4, h = (i / 2) % 2, e = i % 2;
    const uint32_t v = kPromotes ? __float_as_uint(accf[kPromotes ? i : 0]) : static_cast<uint32_t>(acc[0][i]);
    ptx::st_shared_b32(tile + 4 * ((8 * j + 2 * t + e) * kPitch + r_lo + 8 * h), v);
  }
  if (split > 1) {
    ptx::cluster_sync();
  } else {
    ptx::named_barrier_sync(kW4ConsumersBarrier, Cfg::kConsumerThreads);
  }
  using Row = decltype(epi.row(0));
  using Col = decltype(epi.col(0));
  using Out = typename Epi::OutT;
  using Sum = std::conditional_t<kPromotes, float, int32_t>;
  constexpr int kColsPerLane = Cfg::kBN / 32;
  constexpr int kWarps = Cfg::kConsumerThreads / 32;
  static_assert(Cfg::kRowsM <= 32 * kWarps, "a consumer warp stores at most 32 rows of the tile, one per lane");
  Col cols[kColsPerLane];
#pragma unroll
  for (int q = 0; q < kColsPerLane; ++q) cols[q] = epi.col(min(row0 + lane + 32 * q, args.n - 1));
  Out* d = static_cast<Out*>(args.d);
  const int rows = min(Cfg::kRowsM, args.m - m0);
  const int first_row = rank + split * (c / 32), row_step = split * kWarps;
  Row lane_row{};          // the terms of the warp's row `lane`
  int32_t lane_bias = 0;   // and what the uint8 weight's + 128 added to it (promotion's signed weight adds nothing)
  if (const int ml = first_row + lane * row_step; ml < rows) {
    lane_row = epi.row(m0 + ml);
    if constexpr (!kPromotes) lane_bias = wrap_mul(128, args.a_rowsum[m0 + ml]);
  }
  auto store_rows = [&](auto split_c) {
    constexpr int kSplit = decltype(split_c)::value;
#pragma unroll 1
    for (int i = 0, ml = first_row; ml < rows; ++i, ml += row_step) {
      Row row_terms{};
      if constexpr (!std::is_empty_v<Row>) row_terms = shfl_words(lane_row, i);
      const int32_t bias = __shfl_sync(0xffffffffu, lane_bias, i);
      const int m = m0 + ml;
      Sum part[kColsPerLane][kSplit];
#pragma unroll
      for (int q = 0; q < kColsPerLane; ++q) {
        const uint8_t* at = smem + 4 * (ml * kPitch + lane + 32 * q);
        if constexpr (kSplit == 1) {
          const uint32_t bits = ptx::ld_shared_b32(ptx::smem_addr(at));
          if constexpr (kPromotes) {
            part[q][0] = __uint_as_float(bits);
          } else {
            part[q][0] = static_cast<int32_t>(bits);
          }
        } else {
#pragma unroll
          for (int r = 0; r < kSplit; ++r) part[q][r] = ptx::ld_shared_cluster(ptx::cluster_map_shared(at, r), Sum{});
        }
      }
      Out* d_row = d + static_cast<int64_t>(m) * args.ldd;
#pragma unroll
      for (int q = 0; q < kColsPerLane; ++q) {
        const int n = row0 + lane + 32 * q;
        Sum v = part[q][0];
#pragma unroll
        for (int r = 1; r < kSplit; ++r) {  // in rank order
          if constexpr (kPromotes) {
            v += part[q][r];
          } else {
            v = wrap_add(v, part[q][r]);
          }
        }
        if (n < args.n) {
          if constexpr (kPromotes) {
            d_row[n] = epi.full(v, row_terms, cols[q], m, n);
          } else {
            d_row[n] = epi.full(wrap_sub(v, bias), row_terms, cols[q], m, n);
          }
        }
      }
    }
  };
  static_assert(kW4MaxSplit == 4, "a case per split");
  switch (split) {
    case 1: store_rows(std::integral_constant<int, 1>{}); break;
    case 2: store_rows(std::integral_constant<int, 2>{}); break;
    case 3: store_rows(std::integral_constant<int, 3>{}); break;
    default: store_rows(std::integral_constant<int, 4>{}); break;
  }
  if (split > 1) ptx::cluster_sync();  // the other blocks read this block's tile until here
#endif
}

template <class Cfg, class Epi>
void launch_w4(const GemmProblem& p, const Epi& epi, int split) {
  if constexpr (!config_serves<Cfg, Epi>()) {
    throw std::logic_error("tcgemm: the W4 kernel is not built for this epilogue");
  } else {
    if (!p.b_int4 || !p.a_w4_order || !p.a.is_signed || p.k % Cfg::kBK != 0)
      throw std::logic_error("tcgemm: the W4 kernel needs a packed B, a signed A in its K order and K % 128 == 0");
    W4Params args{};
    args.m = p.m;
    args.n = p.n;
    args.k_blocks = p.k / Cfg::kBK;
    split = std::max(1, std::min(split, args.k_blocks));
    args.kb_per_split = ceil_div(args.k_blocks, split);
    split = ceil_div(args.k_blocks, args.kb_per_split);  // no empty share
    if (split > kW4MaxSplit)
      throw std::logic_error("tcgemm: the W4 kernel splits K over at most 4 blocks of a cluster");
    args.x_box_rows = std::min(Cfg::kRowsM, round_up(p.m, 8));
    args.d = p.d.ptr;
    args.ldd = p.d.ld;
    args.group_scale = p.b_group_scale;
    args.group_scale_stride = p.b_group_scale_stride;
    int scale_bytes = 0;
    if constexpr (Epi::kPromotes) {
      if (p.b_group_scale != nullptr)
        throw std::logic_error("tcgemm: the W4 kernel takes int8 group scales or fp32 block scales, not both");
      // fp32 rows an odd number of words apart: the 8 rows a warp reads at once fall in distinct banks
      args.scale_pitch = args.kb_per_split | 1;
      if (args.kb_per_split > Cfg::kMaxFloatScaleBlocks)
        throw std::logic_error("tcgemm: a W4 block holds the fp32 scales of at most kMaxFloatScaleBlocks K blocks");
      scale_bytes = 4 * Cfg::kBN * args.scale_pitch;
    } else {
      if (p.a_w4_rowsum == nullptr) throw std::logic_error("tcgemm: the W4 kernel needs A's row sums");
      args.a_rowsum = p.a_w4_rowsum;
      // byte rows an odd number of words apart, likewise
      args.scale_pitch = 4 * (ceil_div(args.kb_per_split, 4) | 1);
      if (args.kb_per_split > Cfg::kMaxScaleBlocks)
        throw std::logic_error("tcgemm: a W4 block holds the group scales of at most kMaxScaleBlocks K blocks");
      scale_bytes = args.group_scale != nullptr ? Cfg::kBN * args.scale_pitch : 0;
    }
    const CUtensorMap map_x = make_operand_tensor_map(p.a, p.m, p.k, args.x_box_rows, "a");
    const CUtensorMap map_w = make_packed_operand_tensor_map(p.b, p.n, p.k, Cfg::kBN, "b");
    constexpr auto kernel = sm90_w4_kernel<Cfg, Epi>;
    allow_dynamic_smem<kernel, Cfg::kMaxSmemBytes>();
    const int smem_bytes = Cfg::kRingSmemBytes + scale_bytes;
    const dim3 grid(split, ceil_div(p.n, Cfg::kBN), ceil_div(p.m, Cfg::kRowsM));
    launch_kernel_in_clusters(kernel, grid, dim3(Cfg::kThreads), smem_bytes, p.stream, p.pdl,
                              static_cast<unsigned>(split), map_x, map_w, args, epi);
  }
}

template <class Cfg>
int w4_resident_blocks(int split) {
  constexpr auto kernel = sm90_w4_kernel<Cfg, Int32Epilogue>;
  allow_dynamic_smem<kernel, Cfg::kMaxSmemBytes>();
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {static_cast<unsigned>(split), 1, 1};
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(split), 1, 1);
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = Cfg::kMaxSmemBytes;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  TCGEMM_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  return clusters * split;
}

}  // namespace tcgemm::sm90

// The launchers of one W4 config for every epilogue it serves (one translation unit per config).
#define TCGEMM_SM90_W4_INSTANTIATE_ONE(Epi, Cfg) \
  template void tcgemm::sm90::launch_w4<Cfg, Epi>(const tcgemm::GemmProblem&, const Epi&, int);
#define TCGEMM_SM90_W4_INSTANTIATE(Cfg)                                \
  TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_SM90_W4_INSTANTIATE_ONE, Cfg)        \
  template int tcgemm::sm90::w4_resident_blocks<Cfg>(int);

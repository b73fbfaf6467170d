// The W4 kernel: W4A8 at 17-512 rows of x on Hopper, with the packed 4-bit weight as wgmma's
// register operand A and x as its shared-memory operand B, so that D^T = W x^T comes out of the
// tensor cores with the weight never written back to shared memory as int8.
//
//   * Tiles: kBN weight rows (64 per consumer warpgroup) by kRowsM rows of x (wgmma N), all of K
//     or, in clusters of `split` blocks, a share of its K blocks each (W4Params::kb_per_split).
//   * Producer warpgroup: thread 0 has TMA bring each K block's x tile ([kRowsM][128], 128-byte
//     swizzle) and the weight's packed rows ([kBN][64], as stored) into a ring slot. The
//     consumers first read the tile's group scales of all the block's K blocks into shared
//     memory (w4_load_group_scales), while the ring fills.
//   * x is in the W4 K order (common/int4.h: the W4 K order; GemmProblem::a_w4_order): within a
//     K block, thread t of a quad reads the 16 packed bytes of K 32t .. 32t + 31 of each of its
//     two weight rows (one shared load each, no bank conflicts), and packed word s unpacked even /
//     odd is the A fragment of k-step s, as uint8 q * s + 128 (five instructions per eight values;
//     the epilogue subtracts 128 times x's row sums, which the pass that orders x writes).
//   * Per K block a thread issues four wgmma from one of two register sets of A, waits for the
//     four of the K block before (which read the other set) and hands its ring slot back, then
//     unpacks the next K block's 64 values into the other set while its four run.
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
#include "epilogue/epilogues.h"
#include "kernels/sm90/configs.h"
#include "kernels/sm90/sm90_scheduler.cuh"
#include "kernels/sm90/sm90_tensor_map.h"
#include "kernels/sm90/sm90_w4.h"
#include "ptx/cache_policy.cuh"
#include "ptx/cluster.cuh"
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
  int scale_pitch;            // bytes between the rows of the block's group scales in shared memory
};

// The named barrier of the consumer warpgroups: their group scales loaded, and later, with a K
// split, every warpgroup past the ring before their sums overwrite it.
constexpr int kW4ConsumersBarrier = 1;

// The tile's group scales of the block's K blocks into shared memory (`scales`: row r's at
// r * pitch + kb - kb_begin; 1 past N), by threads `thread` of `threads`, 16 loads in flight each:
// read once at the start, while the first K blocks' copies are on their way, rather than per K
// block on the main loop's chain.
template <class Cfg>
__device__ __forceinline__ void w4_load_group_scales(const W4Params& args, int row0, int kb_begin, int kb_count,
                                                     uint8_t* scales, int thread, int threads) {
  constexpr int kInFlight = 16;
  const int total = Cfg::kBN * kb_count;
  for (int first = thread; first < total; first += kInFlight * threads) {
    uint8_t v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * threads, r = i / kb_count, kb = i - r * kb_count;
      v[j] = 1;
      if (i < total && row0 + r < args.n)
        v[j] = static_cast<uint8_t>(
            args.group_scale[static_cast<int64_t>(row0 + r) * args.group_scale_stride + kb_begin + kb]);
    }
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) {
      const int i = first + j * threads, r = i / kb_count, kb = i - r * kb_count;
      if (i < total) scales[r * args.scale_pitch + kb] = v[j];
    }
  }
}

template <class Cfg, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kBlocksPerSM)
    sm90_w4_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                   const W4Params args, const Epi epi) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mma = ptx::WgmmaInt8RegA<Cfg::kRowsM, true, /*ASigned=*/false>;
  constexpr int kStages = Cfg::kStages;
  constexpr int kRegs = Cfg::kAccRegs;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(round_up<uintptr_t>(reinterpret_cast<uintptr_t>(smem_raw), 1024));
  uint8_t* x_tiles = smem;                                  // kStages x [kRowsM][128], swizzled
  uint8_t* w_tiles = smem + kStages * Cfg::kXTileBytes;     // kStages x [kBN][64], packed
  uint64_t* full = reinterpret_cast<uint64_t*>(w_tiles + kStages * Cfg::kWTileBytes);
  uint64_t* empty = full + kStages;
  uint8_t* scales = reinterpret_cast<uint8_t*>(empty + kStages);  // [kBN][scale_pitch]: the block's K blocks

  const int split = static_cast<int>(gridDim.x);  // the cluster's blocks share the tile's K blocks
  const int rank = static_cast<int>(blockIdx.x);
  const int row0 = blockIdx.y * Cfg::kBN;         // the tile's first weight row (column of D)
  const int m0 = blockIdx.z * Cfg::kRowsM;        // and first row of x (row of D)
  const int kb_begin = rank * args.kb_per_split;
  const int kb_end = min(args.k_blocks, kb_begin + args.kb_per_split);
  const bool scaled = args.group_scale != nullptr;

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
      RingPosition<kStages> ring;
      for (int kb = kb_begin; kb < kb_end; ++kb, ring.advance()) {
        ptx::mbarrier_wait(&empty[ring.slot], ring.phase ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full[ring.slot], stage_bytes);
        ptx::tma_load_2d(x_tiles + ring.slot * Cfg::kXTileBytes, &map_x, &full[ring.slot], kb * Cfg::kBK, m0, keep);
        ptx::tma_load_2d(w_tiles + ring.slot * Cfg::kWTileBytes, &map_w, &full[ring.slot], kb * Cfg::kBK / 2, row0,
                         stream);
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
    w4_load_group_scales<Cfg>(args, row0, kb_begin, kb_end - kb_begin, scales, threadIdx.x - 128,
                              Cfg::kConsumerThreads);
    ptx::named_barrier_sync(kW4ConsumersBarrier, Cfg::kConsumerThreads);
  }

  const int c = static_cast<int>(threadIdx.x) - 128;  // consumer thread
  const int wg = c / 128, warp = (c / 32) % 4, lane = c % 32;
  const int g = lane / 4, t = lane % 4;
  const int r_lo = wg * 64 + warp * 16 + g;  // the thread's weight rows in the tile: r_lo, r_lo + 8
  const uint32_t w0 = ptx::smem_addr(w_tiles), s0 = ptx::smem_addr(scales);
  const uint64_t desc_x0 = ptx::wgmma_desc_k_major_sw128(x_tiles);

  int32_t acc[1][kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) acc[0][i] = 0;
  constexpr int kSets = 2;
  uint32_t a[kSets][4][4];  // register sets of A: [set][k-step][fragment register]

  // K block kb (landed in `slot`) read and unpacked into register set Set.
  auto unpack = [&](auto set, int slot, int kb) {
    constexpr int Set = decltype(set)::value;
    const uint32_t w = w0 + slot * Cfg::kWTileBytes + 16 * t;
    const int4 lo = ptx::ld_shared_v4(w + r_lo * (Cfg::kBK / 2));
    const int4 hi = ptx::ld_shared_v4(w + (r_lo + 8) * (Cfg::kBK / 2));
    uint32_t s_lo = 1, s_hi = 1;
    if (scaled) {
      const uint32_t at = s0 + r_lo * args.scale_pitch + kb - kb_begin;
      s_lo = ptx::ld_shared_u8(at);
      s_hi = ptx::ld_shared_u8(at + 8 * args.scale_pitch);
    }
    const uint32_t words_lo[4] = {static_cast<uint32_t>(lo.x), static_cast<uint32_t>(lo.y),
                                  static_cast<uint32_t>(lo.z), static_cast<uint32_t>(lo.w)};
    const uint32_t words_hi[4] = {static_cast<uint32_t>(hi.x), static_cast<uint32_t>(hi.y),
                                  static_cast<uint32_t>(hi.z), static_cast<uint32_t>(hi.w)};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      unpack_int4x8_scaled_even_odd_biased(words_lo[s], s_lo, a[Set][s][0], a[Set][s][2]);
      unpack_int4x8_scaled_even_odd_biased(words_hi[s], s_hi, a[Set][s][1], a[Set][s][3]);
    }
  };
  // The four wgmma of K block `slot` from register set Set.
  auto issue = [&](auto set, int slot, bool accumulate) {
    constexpr int Set = decltype(set)::value;
    ptx::wgmma_fence();
    const uint64_t desc = ptx::wgmma_desc_advance(desc_x0, slot * Cfg::kXTileBytes);
#pragma unroll
    for (int s = 0; s < 4; ++s)
      Mma::mma(a[Set][s], ptx::wgmma_desc_advance(desc, s * Cfg::kMmaK), acc[0], accumulate || s > 0);
    ptx::wgmma_commit_group();
  };
  // K block kb from set Set: its wgmma issued, the next K block unpacked into the next set while
  // they run, then the wgmma of the K block before retire and its slot goes back. A set is written
  // only once no pending wgmma reads it: with two sets (and a wait for all before the next K
  // block's unpacking) the tensor cores drained every K block; writing a set that a pending wgmma
  // reads makes ptxas serialize every wgmma (warning C7513).
  RingPosition<kStages> ring, retire;  // the next K block to issue; the oldest one not handed back
  auto step = [&](auto set, int kb) {
    constexpr int Set = decltype(set)::value;
    issue(set, ring.slot, kb > kb_begin);
    ring.advance();
    if (kb > kb_begin) {
      ptx::wgmma_wait_group<1>(acc);
      ptx::wgmma_fence_operands(a[(Set + kSets - 1) % kSets]);
      if (lane == 0) ptx::mbarrier_arrive(&empty[retire.slot]);
      retire.advance();
    }
    if (kb + 1 < kb_end) {
      ptx::mbarrier_wait(&full[ring.slot], ring.phase);
      unpack(std::integral_constant<int, (Set + 1) % kSets>{}, ring.slot, kb + 1);
    }
  };
  ptx::mbarrier_wait(&full[ring.slot], ring.phase);
  unpack(std::integral_constant<int, 0>{}, ring.slot, kb_begin);
  for (int kb = kb_begin; kb < kb_end; kb += kSets) {
    step(std::integral_constant<int, 0>{}, kb);
    if (kb + 1 < kb_end) step(std::integral_constant<int, 1>{}, kb + 1);
  }
  ptx::wgmma_wait_group<0>(acc);
  // The epilogue. The sums go to shared memory as the tile of D ([kRowsM][kTilePitch] int32, over
  // the ring, which every warpgroup is past): acc[4j + 2h + e] is weight row r_lo + 8h (column of
  // D), x row 8j + 2t + e; a pitch of 4 words past a multiple of 32 puts a warp's stores in 32
  // distinct banks. Then warp w of the consumers takes the tile's rows w, w + 8, ..., each lane the
  // columns lane, lane + 32, ...: one pass of compact code (fully unrolled per register it would
  // be fetched once and run once, bound by instruction fetch), stores of whole rows of D, and with a
  // K split the cluster's tiles added in rank order, block r taking the rows r, r + split, ...
  constexpr int kPitch = Cfg::kTilePitch;
  const uint32_t tile = ptx::smem_addr(smem);
  ptx::named_barrier_sync(kW4ConsumersBarrier, Cfg::kConsumerThreads);
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int j = i / 4, h = (i / 2) % 2, e = i % 2;
    ptx::st_shared_b32(tile + 4 * ((8 * j + 2 * t + e) * kPitch + r_lo + 8 * h), acc[0][i]);
  }
  if (split > 1) {
    ptx::cluster_sync();
  } else {
    ptx::named_barrier_sync(kW4ConsumersBarrier, Cfg::kConsumerThreads);
  }
  using Col = decltype(epi.col(0));
  using Out = typename Epi::OutT;
  constexpr int kColsPerLane = Cfg::kBN / 32;
  Col cols[kColsPerLane];
#pragma unroll
  for (int q = 0; q < kColsPerLane; ++q) cols[q] = epi.col(min(row0 + lane + 32 * q, args.n - 1));
  Out* d = static_cast<Out*>(args.d);
  const int rows = min(Cfg::kRowsM, args.m - m0);
#pragma unroll 1
  for (int ml = rank + split * (c / 32); ml < rows; ml += split * (Cfg::kConsumerThreads / 32)) {
    const int m = m0 + ml;
    const auto row_terms = epi.row(m);
    const int32_t bias = wrap_mul(128, args.a_rowsum[m]);  // what the uint8 weight's + 128 added
    Out* d_row = d + static_cast<int64_t>(m) * args.ldd;
#pragma unroll
    for (int q = 0; q < kColsPerLane; ++q) {
      const int nl = lane + 32 * q, n = row0 + nl;
      const uint8_t* at = smem + 4 * (ml * kPitch + nl);
      int32_t v;
      if (split == 1) {
        v = static_cast<int32_t>(ptx::ld_shared_b32(ptx::smem_addr(at)));
      } else {
        v = 0;
        for (int r = 0; r < split; ++r)
          v = wrap_add(v, ptx::ld_shared_cluster(ptx::cluster_map_shared(at, r), int32_t{}));
      }
      if (n < args.n) d_row[n] = epi.full(wrap_sub(v, bias), row_terms, cols[q], m, n);
    }
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
    args.x_box_rows = std::min(Cfg::kRowsM, round_up(p.m, 8));
    args.d = p.d.ptr;
    args.ldd = p.d.ld;
    if (p.a_w4_rowsum == nullptr) throw std::logic_error("tcgemm: the W4 kernel needs A's row sums");
    args.a_rowsum = p.a_w4_rowsum;
    args.group_scale = p.b_group_scale;
    args.group_scale_stride = p.b_group_scale_stride;
    // rows an odd number of words apart: the 8 rows a warp reads at once fall in distinct banks
    args.scale_pitch = 4 * (ceil_div(args.kb_per_split, 4) | 1);
    if (args.kb_per_split > Cfg::kMaxScaleBlocks)
      throw std::logic_error("tcgemm: a W4 block holds the group scales of at most kMaxScaleBlocks K blocks");
    const CUtensorMap map_x = make_operand_tensor_map(p.a, p.m, p.k, args.x_box_rows, "a");
    const CUtensorMap map_w = make_packed_operand_tensor_map(p.b, p.n, p.k, Cfg::kBN, "b");
    constexpr auto kernel = sm90_w4_kernel<Cfg, Epi>;
    allow_dynamic_smem<kernel, Cfg::kMaxSmemBytes>();
    const int smem_bytes = Cfg::kRingSmemBytes + (args.group_scale != nullptr ? Cfg::kBN * args.scale_pitch : 0);
    const dim3 grid(split, ceil_div(p.n, Cfg::kBN), ceil_div(p.m, Cfg::kRowsM));
    launch_kernel_in_clusters(kernel, grid, dim3(Cfg::kThreads), smem_bytes, p.stream, false,
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

// Hopper int8 GEMM: TMA loads into a multistage shared-memory ring, wgmma from swizzled shared
// memory, warp specialization and a persistent tile loop. The kernel composes its pieces:
//   sm90_scheduler.cuh  which work units (tile x K range) a block takes, and the ring position;
//   sm90_producer.cuh   warpgroup 0: one thread issues the TMA loads of every K block;
//   sm90_unpack_ahead.cuh  a packed 4-bit B that warps 1-3 unpack into B's int8 buffer as the
//                       tiles are computed, which the loads of B wait for;
//   sm90_factors.cuh    with per-block scales, warps 1-3 stage the K blocks' promotion factors;
//   sm90_unpack.cuh     with a packed 4-bit B, how the consumers unpack a K block's B into int8;
//   sm90_mainloop.cuh   warpgroups 1..: wgmma per K block, per-block promotion when the
//                       epilogue asks for it, then the tile's epilogue;
//   sm90_store.cuh      the epilogue stores: staged per warp in swizzled shared memory and
//                       written by TMA (a reduce-add under split-K) while the warp goes on.
// Out-of-range rows and K columns arrive as zeros from TMA; TMA stores clip at the edges of D.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include <cuda.h>

#include "common/cuda_check.h"
#include "common/launch_kernel.cuh"
#include "common/math.h"
#include "common/problem.h"
#include "epilogue/epilogues.h"
#include "kernels/sm90/configs.h"
#include "kernels/sm90/sm90_factors.cuh"
#include "kernels/sm90/sm90_gemm.h"
#include "kernels/sm90/sm90_mainloop.cuh"
#include "kernels/sm90/sm90_producer.cuh"
#include "kernels/sm90/sm90_tensor_map.h"
#include "kernels/sm90/sm90_unpack.cuh"
#include "kernels/sm90/sm90_unpack_ahead.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace tcgemm::sm90 {

template <class Cfg, bool ASigned, bool BSigned, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_d, const Params args, const Epi epi,
                     const UnpackAheadArg<Cfg> unpack) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mma = ptx::WgmmaInt8<Cfg::kWN, ASigned, BSigned>;
  constexpr int kStages = Cfg::kStages;
  static_assert(!Epi::kPromotes || (Cfg::kSupportsPerBlock && !Cfg::kPingPong), "config cannot promote per-block scales");

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(round_up<uintptr_t>(reinterpret_cast<uintptr_t>(smem_raw), 1024));
  uint8_t* a_tiles = smem;                                        // kStages x [BM][128], swizzled
  uint8_t* b_tiles = smem + kStages * Cfg::kATileBytes;           // kStages x [BN][128], swizzled (or [BN][64] packed)
  uint8_t* b_int8 = b_tiles + kStages * Cfg::kBTmaTileBytes;      // packed B: kBInt8Tiles x [BN][128], swizzled
  uint8_t* epi_buffers = b_int8 + Cfg::kBInt8Tiles * Cfg::kBTileBytes;  // per consumer warp: 2 x [16][128 bytes]
  float* factors = reinterpret_cast<float*>(epi_buffers + Cfg::kEpiBytes);  // kFactorSlots x [kFactorSlotFloats]
  uint8_t* group_scales = epi_buffers + Cfg::kEpiBytes + Cfg::kFactorBytes;  // packed B: kStages x [BN]
  uint64_t* full = reinterpret_cast<uint64_t*>(group_scales + Cfg::kGroupScaleBytes);
  uint64_t* empty = full + kStages;
  uint64_t* tile_free = empty + kStages;  // packed B: per int8 tile, its last reader's wgmma retired
  constexpr uint32_t kFullArrivals =
      1 + (Epi::kPromotes ? kFactorWarpArrivals : 0) + (Cfg::kBInt4 ? kGroupScaleArrivals : 0);
  constexpr uint32_t kEmptyArrivals = Cfg::kSlotReaders * (Epi::kPromotes ? kConsumerArrivalsPerWarp : 1);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], kFullArrivals);       // the producer's expect_tx (+ the factors)
      ptx::mbarrier_init(&empty[s], kEmptyArrivals);     // the reading warps (their lanes, per-block)
    }
    for (int t = 0; t < Cfg::kBInt8Tiles; ++t) ptx::mbarrier_init(&tile_free[t], 4 * Cfg::kConsumerWarpgroups);
    ptx::mbarrier_fence_init();
    ptx::tma_prefetch_descriptor(&map_a);
    ptx::tma_prefetch_descriptor(&map_b);
    if (args.d_tma) ptx::tma_prefetch_descriptor(&map_d);
  }
  // A shorter than one tile: each stage loads only its first a_box_rows rows (a box mostly out of
  // bounds costs ~10% at 17-33 rows against 8192 x 8192, docs/design/sm90.md), so the rows below
  // stay zero for the whole run. Whole 128-byte rows: the swizzle keeps rows apart.
  if (args.a_box_rows < Cfg::kBM) {
    constexpr int kChunksPerRow = Cfg::kBK / 16;
    const int chunks = (Cfg::kBM - args.a_box_rows) * kChunksPerRow;
    for (int i = threadIdx.x; i < kStages * chunks; i += blockDim.x) {
      const int stage = i / chunks, rest = i % chunks;
      *reinterpret_cast<uint4*>(a_tiles + stage * Cfg::kATileBytes + args.a_box_rows * Cfg::kBK + 16 * rest) =
          make_uint4(0, 0, 0, 0);
    }
    ptx::fence_proxy_async_shared();  // before wgmma reads them
  }
  __syncthreads();

  if (threadIdx.x / 128 == 0) {
    // The producer warpgroup gives back registers; one thread issues the loads, and with
    // per-block scales warps 1-3 stage the promotion factors, or unpack B (Cfg::kBUnpacks), or
    // with a packed B warp 1 stages its group scales.
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) produce<Cfg>(args, unpack, &map_a, &map_b, a_tiles, b_tiles, full, empty);
    if constexpr (Cfg::kBInt4) {
      if (threadIdx.x / 32 == 1) stage_group_scales<Cfg>(args, ptx::smem_addr(group_scales), full, empty, threadIdx.x % 32);
    } else if constexpr (Epi::kPromotes) {
      const int warp = threadIdx.x / 32;
      if (warp >= 1 && warp <= Cfg::kFactorSlots)
        stage_factors<Cfg>(args, epi, ptx::smem_addr(factors), full, empty, warp - 1, threadIdx.x % 32);
    } else if constexpr (Cfg::kBUnpacks) {
      if (threadIdx.x >= 32) unpack_ahead<Cfg>(unpack, args.sched.tiles_n, threadIdx.x % 32);
    }
    return;
  }
  ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
  Consumer<Cfg, Mma, Epi> consumer(args, epi, &map_d, a_tiles, Cfg::kBInt4 ? b_int8 : b_tiles, epi_buffers, full,
                                   empty);
  if constexpr (Epi::kPromotes) {
    consume_tiles_promoting(consumer, ptx::smem_addr(factors));
  } else if constexpr (Cfg::kBInt4) {
    consume_tiles_unpacking(consumer,
                            BUnpacker<Cfg>(b_tiles, b_int8, ptx::smem_addr(group_scales), consumer.wg_m, consumer.wg_n),
                            tile_free);
  } else {
    consume_tiles(consumer);
  }
  // The shared-memory sources of the last stores must stay valid until TMA has read them.
  if (args.d_tma && consumer.lane == 0) ptx::bulk_wait_group<0>();
#endif
}

// What a kernel with Cfg::kBUnpacks reads to unpack p's B (p.b_unpack; p.b is the int8 buffer it
// fills): the chunks go by bands of the column tiles the first wave of `grid` blocks takes
// (sm90_unpack_ahead.cuh). Other configs take nothing.
template <class Cfg>
UnpackAheadArg<Cfg> unpack_ahead_args(const GemmProblem& p, const TileScheduler& s, int grid) {
  if ((p.b_unpack != nullptr) != Cfg::kBUnpacks)
    throw std::logic_error("tcgemm: sm90 config and B's unpacking in the kernel disagree");
  UnpackAheadArg<Cfg> u{};
  if constexpr (Cfg::kBUnpacks) {
    if (p.b_int4 || !p.b.k_major()) throw std::logic_error("tcgemm: the sm90 kernel unpacks into a K-major int8 B");
    u.src = *p.b_unpack;
    u.out = static_cast<int8_t*>(const_cast<void*>(p.b.ptr));
    u.out_stride = p.b.stride_row;
    u.n = p.n;
    u.k = p.k;
    u.segments = ceil_div(p.k, kUnpackSegmentK);
    if (1 + int64_t{s.tiles_n} * u.segments > p.b_unpack->flag_words)
      throw std::logic_error("tcgemm: too few flags for the sm90 kernel's unpacking");
    u.band_cols = std::max(1, ceil_div(grid, s.tiles_m));
  }
  return u;
}

template <class Cfg, class Epi, bool ASigned, bool BSigned>
void launch_kernel(const GemmProblem& p, const Epi& epi, int sm_count) {
  using Out = typename Epi::OutT;
  Params args{};
  args.m = p.m;
  args.n = p.n;
  TileScheduler& s = args.sched;
  s.k_blocks = ceil_div(p.k, Cfg::kBK);
  s.split_k = Epi::kAddsPartials ? std::max(1, std::min(p.split_k, s.k_blocks)) : 1;
  s.k_blocks_split = ceil_div(s.k_blocks, s.split_k);
  s.split_k = ceil_div(s.k_blocks, s.k_blocks_split);  // no empty split
  s.tiles_m = ceil_div(p.m, Cfg::kBM);
  s.tiles_n = ceil_div(p.n, Cfg::kBN);
  args.a_box_rows = std::min(Cfg::kBM, round_up(p.m, 8));
  args.d = p.d.ptr;
  args.ldd = p.d.ld;
  args.d_vec2 = p.d.ld % 2 == 0 && reinterpret_cast<uintptr_t>(p.d.ptr) % (2 * sizeof(Out)) == 0;
  args.d_tma = tma_storable(p.d.ptr, sizeof(Out), p.m, p.d.ld);
  if (p.b_int4 != Cfg::kBInt4) throw std::logic_error("tcgemm: sm90 config and B's packing disagree");
  args.b_group_scale = p.b_group_scale;
  args.b_group_scale_stride = p.b_group_scale_stride;

  const CUtensorMap map_a = make_operand_tensor_map(p.a, p.m, p.k, args.a_box_rows, "a");
  const CUtensorMap map_b = Cfg::kBInt4 ? make_packed_operand_tensor_map(p.b, p.n, p.k, Cfg::kBN, "b")
                                        : make_operand_tensor_map(p.b, p.n, p.k, Cfg::kBN, "b");
  CUtensorMap map_d{};
  if (args.d_tma) {
    map_d = make_output_tensor_map(p.d.ptr, p.d.type, p.m, p.n, p.d.ld, Cfg::kEpiRows,
                                   Cfg::kEpiRowBytes / static_cast<int>(sizeof(Out)));
  }
  constexpr auto kernel = sm90_gemm_kernel<Cfg, ASigned, BSigned, Epi>;
  allow_dynamic_smem<kernel, Cfg::kSmemBytes>();
  const int64_t units = static_cast<int64_t>(s.tiles_m) * s.tiles_n * s.split_k;
  const int grid = static_cast<int>(std::min<int64_t>(units, sm_count));
  const UnpackAheadArg<Cfg> unpack = unpack_ahead_args<Cfg>(p, s, grid);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(map_a, map_b, map_d, args, epi, unpack);
  TCGEMM_CHECK_LAUNCH();
}

template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count) {
  if constexpr (!config_serves<Cfg, Epi>()) {
    throw std::logic_error("tcgemm: this sm90 tile config is not built for this epilogue");
  } else {
    with_operand_signs<Epi>(p, [&](auto a_signed, auto b_signed) {
      launch_kernel<Cfg, Epi, decltype(a_signed)::value, decltype(b_signed)::value>(p, epi, sm_count);
    });
  }
}

}  // namespace tcgemm::sm90

// The launchers of one tile config for every epilogue it serves (one translation unit per config).
#define TCGEMM_SM90_INSTANTIATE_ONE(Epi, Cfg) \
  template void tcgemm::sm90::launch<Cfg, Epi>(const tcgemm::GemmProblem&, const Epi&, int);

// Hopper int8 GEMM: TMA loads into a multistage shared-memory ring, wgmma from swizzled shared
// memory, warp specialization and a persistent tile loop.
//
//   warpgroup 0 (producer): one thread walks the block's work units and, for every 128-byte K
//     block, waits until the ring slot is free ("empty" mbarrier), then has TMA copy the A and B
//     boxes into it and land on the slot's "full" mbarrier. The other producer threads idle
//     with few registers (setmaxnreg.dec).
//   warpgroups 1.. (consumers): each owns a 64 x WN piece of the BM x BN tile; per slot it waits
//     on "full", issues four m64nWNk32 wgmma (K = 128 bytes), and once those have retired
//     (wait_group with one group still in flight) frees the previous slot. At the end of a unit
//     it applies the int32 epilogue on its registers and writes D, while the producer already
//     fills the ring for the next unit.
//
// Work units are output tiles in grouped order (GroupM tile rows per group, for L2 reuse of B),
// times split_k ranges of K. Units go round-robin to gridDim.x <= #SMs resident blocks, and both
// roles walk the same sequence, so the ring's slot/phase counters stay in step.
// Out-of-range rows and K columns arrive as zeros from TMA; the epilogue masks rows and columns.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda.h>

#include "common/cuda_check.h"
#include "common/gemm_params.h"
#include "common/math.h"
#include "epilogue/int32_epilogue.h"
#include "kernels/sm90/sm90_int8_gemm.h"
#include "kernels/sm90/sm90_tensor_map.h"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace tcgemm::sm90 {

// Problem description the kernel needs beyond the two tensor maps.
struct Sm90Args {
  int m, n;
  int k_blocks;         // ceil(K / 128)
  int k_blocks_split;   // K blocks per split (the last split may have fewer)
  int split_k;
  int tiles_m, tiles_n;
  int32_t* d;
  int64_t ldd;
  bool d_vec2;          // D rows start 8-byte aligned: columns pairs go out as one 8-byte store
  Int32EpilogueParams epilogue;
};

// One unit of work: an output tile and its range of K blocks.
struct WorkUnit {
  int tile_m, tile_n;
  int kb_begin, kb_end;
};

template <int GroupM>
__device__ __forceinline__ WorkUnit work_unit(const Sm90Args& args, int unit) {
  const int tiles = args.tiles_m * args.tiles_n;
  const int split = unit / tiles;  // concurrent blocks share a K range: their A and B rows overlap in L2
  const int tile = unit - split * tiles;
  const int group_size = GroupM * args.tiles_n;
  const int group = tile / group_size;
  const int first_m = group * GroupM;
  const int rows_in_group = min(args.tiles_m - first_m, GroupM);
  const int in_group = tile - group * group_size;
  WorkUnit w;
  w.tile_m = first_m + in_group % rows_in_group;
  w.tile_n = in_group / rows_in_group;
  w.kb_begin = split * args.k_blocks_split;
  w.kb_end = min(args.k_blocks, w.kb_begin + args.k_blocks_split);
  return w;
}

// Writes one thread's accumulator fragment: rows row0 and row0 + 8, columns col0 + 8j + {0, 1}.
template <int WN>
__device__ __forceinline__ void store_fragment(const Sm90Args& args, const int32_t (&acc)[WN / 2], int row0,
                                               int col0) {
  const Int32Epilogue epilogue{args.epilogue};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= args.m) continue;
    int32_t* d_row = args.d + static_cast<int64_t>(row) * args.ldd;
#pragma unroll
    for (int j = 0; j < WN / 8; ++j) {
      const int col = col0 + 8 * j;
      const int32_t acc0 = acc[4 * j + 2 * h], acc1 = acc[4 * j + 2 * h + 1];
      if (args.split_k > 1) {
        // Every split adds its scaled partial sum; dispatch prefilled D with epilogue(0).
        if (col < args.n) atomicAdd(d_row + col, epilogue.scale(acc0));
        if (col + 1 < args.n) atomicAdd(d_row + col + 1, epilogue.scale(acc1));
      } else if (args.d_vec2 && col + 1 < args.n) {
        const int2 v = make_int2(epilogue(acc0, row, col), epilogue(acc1, row, col + 1));
        *reinterpret_cast<int2*>(d_row + col) = v;
      } else {
        if (col < args.n) d_row[col] = epilogue(acc0, row, col);
        if (col + 1 < args.n) d_row[col + 1] = epilogue(acc1, row, col + 1);
      }
    }
  }
}

template <class Cfg, bool ASigned, bool BSigned>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_int8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          const Sm90Args args) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mma = ptx::WgmmaInt8<Cfg::kWN, ASigned, BSigned>;
  constexpr int kStages = Cfg::kStages;

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(round_up<uintptr_t>(reinterpret_cast<uintptr_t>(smem_raw), 1024));
  uint8_t* a_tiles = smem;                                   // kStages x [BM][128], swizzled
  uint8_t* b_tiles = smem + kStages * Cfg::kATileBytes;      // kStages x [BN][128], swizzled
  uint64_t* full = reinterpret_cast<uint64_t*>(b_tiles + kStages * Cfg::kBTileBytes);
  uint64_t* empty = full + kStages;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);                                 // the producer's expect_tx
      ptx::mbarrier_init(&empty[s], Cfg::kConsumerWarpgroups * 4);     // one arrival per consumer warp
    }
    ptx::mbarrier_fence_init();
    ptx::tma_prefetch_descriptor(&map_a);
    ptx::tma_prefetch_descriptor(&map_b);
  }
  __syncthreads();

  const int units = args.tiles_m * args.tiles_n * args.split_k;

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x != 0) return;
    int slot = 0;
    uint32_t phase = 0;
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const WorkUnit w = work_unit<Cfg::kGroupM>(args, unit);
      for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
        ptx::mbarrier_wait(&empty[slot], phase ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full[slot], Cfg::kStageBytes);
        ptx::tma_load_2d(a_tiles + slot * Cfg::kATileBytes, &map_a, &full[slot], kb * Cfg::kBK, w.tile_m * Cfg::kBM);
        ptx::tma_load_2d(b_tiles + slot * Cfg::kBTileBytes, &map_b, &full[slot], kb * Cfg::kBK, w.tile_n * Cfg::kBN);
        if (++slot == kStages) {
          slot = 0;
          phase ^= 1;
        }
      }
    }
  } else {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int wg_m = consumer / Cfg::kWgN;
    const int wg_n = consumer % Cfg::kWgN;
    const int warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32;
    const uint64_t desc_a0 = ptx::wgmma_desc_k_major_sw128(a_tiles + wg_m * 64 * Cfg::kBK);
    const uint64_t desc_b0 = ptx::wgmma_desc_k_major_sw128(b_tiles + wg_n * Cfg::kWN * Cfg::kBK);

    int32_t acc[Cfg::kAccRegs];
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) acc[i] = 0;

    int slot = 0;
    uint32_t phase = 0;
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const WorkUnit w = work_unit<Cfg::kGroupM>(args, unit);
      if (w.kb_begin >= w.kb_end) continue;
      int prev_slot = -1;
      for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
        ptx::mbarrier_wait(&full[slot], phase);
        ptx::wgmma_fence();
        const uint64_t desc_a = ptx::wgmma_desc_advance(desc_a0, slot * Cfg::kATileBytes);
        const uint64_t desc_b = ptx::wgmma_desc_advance(desc_b0, slot * Cfg::kBTileBytes);
#pragma unroll
        for (int kk = 0; kk < Cfg::kBK / Cfg::kMmaK; ++kk) {
          Mma::mma(ptx::wgmma_desc_advance(desc_a, kk * Cfg::kMmaK), ptx::wgmma_desc_advance(desc_b, kk * Cfg::kMmaK),
                   acc, kb > w.kb_begin || kk > 0);
        }
        ptx::wgmma_commit_group();
        // The group of the previous K block has retired: its slot can be refilled.
        ptx::wgmma_wait_group<1>(acc);
        if (prev_slot >= 0 && lane == 0) ptx::mbarrier_arrive(&empty[prev_slot]);
        prev_slot = slot;
        if (++slot == kStages) {
          slot = 0;
          phase ^= 1;
        }
      }
      ptx::wgmma_wait_group<0>(acc);
      if (lane == 0) ptx::mbarrier_arrive(&empty[prev_slot]);

      const int row0 = w.tile_m * Cfg::kBM + wg_m * 64 + warp * 16 + lane / 4;
      const int col0 = w.tile_n * Cfg::kBN + wg_n * Cfg::kWN + 2 * (lane % 4);
      store_fragment<Cfg::kWN>(args, acc, row0, col0);
    }
  }
#endif
}

template <class Cfg>
void launch_sm90_int8_gemm(const GemmParams& p, int sm_count) {
  Sm90Args args{};
  args.m = p.m;
  args.n = p.n;
  args.k_blocks = ceil_div(p.k, Cfg::kBK);
  args.split_k = std::max(1, std::min(p.split_k, args.k_blocks));
  args.k_blocks_split = ceil_div(args.k_blocks, args.split_k);
  args.split_k = ceil_div(args.k_blocks, args.k_blocks_split);  // no empty split
  args.tiles_m = ceil_div(p.m, Cfg::kBM);
  args.tiles_n = ceil_div(p.n, Cfg::kBN);
  args.d = p.d;
  args.ldd = p.ldd;
  args.d_vec2 = p.ldd % 2 == 0 && reinterpret_cast<uintptr_t>(p.d) % 8 == 0;
  args.epilogue = p.epilogue;

  const CUtensorMap map_a = make_operand_tensor_map(p.a, p.m, p.k, Cfg::kBM, "a");
  const CUtensorMap map_b = make_operand_tensor_map(p.b, p.n, p.k, Cfg::kBN, "b");

  auto kernel = sm90_int8_gemm_kernel<Cfg, true, true>;
  if (p.a.is_signed && !p.b.is_signed) kernel = sm90_int8_gemm_kernel<Cfg, true, false>;
  if (!p.a.is_signed && p.b.is_signed) kernel = sm90_int8_gemm_kernel<Cfg, false, true>;
  if (!p.a.is_signed && !p.b.is_signed) kernel = sm90_int8_gemm_kernel<Cfg, false, false>;
  TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const int64_t units = static_cast<int64_t>(args.tiles_m) * args.tiles_n * args.split_k;
  const int grid = static_cast<int>(std::min<int64_t>(units, sm_count));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(map_a, map_b, args);
  TCGEMM_CHECK_LAUNCH();
}

}  // namespace tcgemm::sm90

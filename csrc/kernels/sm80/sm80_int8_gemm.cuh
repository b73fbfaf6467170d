// The Ampere-class int8 GEMM: mma.sync m16n8k32 fed by ldmatrix from XOR-swizzled shared memory,
// a multistage cp.async pipeline, grouped tile rasterization for L2 reuse.
// Both operands are K-major (A row-major, B column-major) with 16-byte aligned rows; the binding
// layer makes such a copy of any operand that is not. M, N and K tails are predicated in-kernel.
#pragma once

#include <cstdint>

#include "common/cuda_check.h"
#include "common/gemm_params.h"
#include "common/math.h"
#include "epilogue/int32_epilogue.h"
#include "kernels/sm80/sm80_int8_gemm.h"
#include "kernels/sm80/sm80_tile_config.h"
#include "ptx/cp_async.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/mma.cuh"

namespace tcgemm::sm80 {

// Chunk c (16 bytes) of row r lives at chunk c ^ (r % 8): the 8 rows an ldmatrix phase reads
// and the 8 chunks a cp.async row writes then fall in 8 distinct bank groups.
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// Issues the cp.async copies of one [Rows x 128-byte] K slice of a K-major operand.
// Rows past `rows_valid` and bytes past K are zero-filled without being read.
template <int Rows, int Threads>
__device__ __forceinline__ void load_slice_async(uint8_t* smem, const uint8_t* rows_base, int64_t ld,
                                                 int rows_valid, int k0, int k) {
  constexpr int kCopies = Rows * 8 / Threads;
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    const int idx = i * Threads + static_cast<int>(threadIdx.x);
    const int row = idx >> 3;
    const int chunk = idx & 7;
    const int kb = k0 + chunk * 16;
    const int bytes = row < rows_valid ? max(0, min(16, k - kb)) : 0;
    const uint8_t* src = bytes > 0 ? rows_base + static_cast<int64_t>(row) * ld + kb : rows_base;
    ptx::cp_async_16_zfill(smem + swizzled_offset(row, chunk), src, bytes);
  }
}

// Maps a linear block index to a (tile_m, tile_n) pair, walking kGroupM tile rows at a time so
// that concurrently running blocks share both A rows and B columns in L2.
template <int GroupM>
__device__ __forceinline__ void rasterize(int pid, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int group_tiles = GroupM * tiles_n;
  const int first_m = (pid / group_tiles) * GroupM;
  const int group_m = min(tiles_m - first_m, GroupM);
  const int in_group = pid % group_tiles;
  tile_m = first_m + in_group % group_m;
  tile_n = in_group / group_m;
}

template <class Cfg>
struct WarpFragments {
  uint32_t a[Cfg::kMmaM][4];
  uint32_t b[Cfg::kMmaN][2];
};

// Loads the A and B fragments of mma k-step `ks` (32 bytes of K) for one warp.
template <class Cfg>
__device__ __forceinline__ void load_fragments(WarpFragments<Cfg>& f, const uint8_t* sa, const uint8_t* sb,
                                               int warp_m0, int warp_n0, int lane, int ks) {
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i) {
    const int row = warp_m0 + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ptx::ldmatrix_x4(f.a[i], sa + swizzled_offset(row, ks * 2 + (lane >> 4)));
  }
#pragma unroll
  for (int j = 0; j < Cfg::kMmaN / 2; ++j) {
    const int row = warp_n0 + j * 16 + (lane & 7) + (lane >> 4) * 8;
    uint32_t r[4];
    ptx::ldmatrix_x4(r, sb + swizzled_offset(row, ks * 2 + ((lane >> 3) & 1)));
    f.b[2 * j][0] = r[0];
    f.b[2 * j][1] = r[1];
    f.b[2 * j + 1][0] = r[2];
    f.b[2 * j + 1][1] = r[3];
  }
}

// Writes two horizontally adjacent results through the shared epilogue, 8 bytes at once when allowed.
__device__ __forceinline__ void store_pair(const GemmParams& p, const Int32Epilogue& epi, bool vec2, int row,
                                           int col, int32_t v0, int32_t v1) {
  if (row >= p.m || col >= p.n) return;
  int32_t* dst = p.d + static_cast<int64_t>(row) * p.ldd + col;
  if (vec2 && col + 1 < p.n) {
    *reinterpret_cast<int2*>(dst) = make_int2(epi(v0, row, col), epi(v1, row, col + 1));
  } else {
    dst[0] = epi(v0, row, col);
    if (col + 1 < p.n) dst[1] = epi(v1, row, col + 1);
  }
}

template <class Cfg, bool ASigned, bool BSigned>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm80_int8_gemm_kernel(const GemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem + Cfg::kStages * Cfg::kStageBytesA;

  const int tiles_m = ceil_div(p.m, Cfg::kBM);
  const int tiles_n = ceil_div(p.n, Cfg::kBN);
  int tile_m, tile_n;
  rasterize<Cfg::kGroupM>(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * Cfg::kBM;
  const int n0 = tile_n * Cfg::kBN;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warp_m0 = (warp / Cfg::kWarpsN) * Cfg::kWarpTileM;
  const int warp_n0 = (warp % Cfg::kWarpsN) * Cfg::kWarpTileN;

  const uint8_t* a_rows = static_cast<const uint8_t*>(p.a.ptr) + static_cast<int64_t>(m0) * p.a.stride_row;
  const uint8_t* b_rows = static_cast<const uint8_t*>(p.b.ptr) + static_cast<int64_t>(n0) * p.b.stride_row;
  const int a_rows_valid = p.m - m0;
  const int b_rows_valid = p.n - n0;
  const int k_tiles = ceil_div(p.k, Cfg::kBK);

  auto load_stage = [&](int stage, int k_tile) {
    const int k0 = k_tile * Cfg::kBK;
    load_slice_async<Cfg::kBM, Cfg::kThreads>(smem_a + stage * Cfg::kStageBytesA, a_rows, p.a.stride_row,
                                              a_rows_valid, k0, p.k);
    load_slice_async<Cfg::kBN, Cfg::kThreads>(smem_b + stage * Cfg::kStageBytesB, b_rows, p.b.stride_row,
                                              b_rows_valid, k0, p.k);
  };

  int32_t acc[Cfg::kMmaM][Cfg::kMmaN][4];
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kMmaN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0;

  // Prologue: Stages-1 slices in flight (empty groups past the end keep the wait counts uniform).
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    ptx::cp_async_commit();
  }

  WarpFragments<Cfg> frag[2];
  for (int kt = 0; kt < k_tiles; ++kt) {
    ptx::cp_async_wait<Cfg::kStages - 2>();
    // Slice kt has landed for every thread, and every warp is done with the stage refilled below.
    __syncthreads();
    const int next = kt + Cfg::kStages - 1;
    if (next < k_tiles) load_stage(next % Cfg::kStages, next);
    ptx::cp_async_commit();

    const int stage = kt % Cfg::kStages;
    const uint8_t* sa = smem_a + stage * Cfg::kStageBytesA;
    const uint8_t* sb = smem_b + stage * Cfg::kStageBytesB;
    load_fragments<Cfg>(frag[0], sa, sb, warp_m0, warp_n0, lane, 0);
#pragma unroll
    for (int ks = 0; ks < Cfg::kBK / 32; ++ks) {
      // Fetch the next k-step's fragments before issuing this one's mma (register double buffer).
      if (ks + 1 < Cfg::kBK / 32) load_fragments<Cfg>(frag[(ks + 1) & 1], sa, sb, warp_m0, warp_n0, lane, ks + 1);
#pragma unroll
      for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::kMmaN; ++j)
          ptx::mma_m16n8k32<ASigned, BSigned>(acc[i][j], frag[ks & 1].a[i], frag[ks & 1].b[j]);
    }
  }
  ptx::cp_async_wait<0>();

  const Int32Epilogue epi{p.epilogue};
  const bool vec2 = (reinterpret_cast<uintptr_t>(p.d) % 8 == 0) && (p.ldd % 2 == 0);
  const int g = lane >> 2;
  const int t = lane & 3;
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::kMmaN; ++j) {
      const int row = m0 + warp_m0 + i * 16 + g;
      const int col = n0 + warp_n0 + j * 8 + 2 * t;
      store_pair(p, epi, vec2, row, col, acc[i][j][0], acc[i][j][1]);
      store_pair(p, epi, vec2, row + 8, col, acc[i][j][2], acc[i][j][3]);
    }
  }
#endif
}

// Host launcher: one block per output tile.
template <class Cfg>
void launch_sm80_int8_gemm(const GemmParams& p) {
  auto kernel = sm80_int8_gemm_kernel<Cfg, true, true>;
  if (p.a.is_signed && !p.b.is_signed) kernel = sm80_int8_gemm_kernel<Cfg, true, false>;
  if (!p.a.is_signed && p.b.is_signed) kernel = sm80_int8_gemm_kernel<Cfg, false, true>;
  if (!p.a.is_signed && !p.b.is_signed) kernel = sm80_int8_gemm_kernel<Cfg, false, false>;
  TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, Cfg::kBM)) * ceil_div(p.n, Cfg::kBN);
  kernel<<<static_cast<unsigned>(tiles), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(p);
  TCGEMM_CHECK_LAUNCH();
}

}  // namespace tcgemm::sm80

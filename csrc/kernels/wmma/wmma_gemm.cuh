// The portable int8 GEMM on nvcuda::wmma 16x16x16 fragments (Turing and later), after the classic
// immaTensorCoreGemm design: 8 warps per block, each warp a grid of fragments, A and B chunks
// staged in skew-padded shared memory with 16-byte vector copies, a persistent grid-stride loop
// over output tiles. Both operands may be K-major or not: wmma's row/col_major fragments read
// either layout from smem, so no operand is ever transposed.
//
// WMMA cannot mix int8 and uint8 operands. A mixed pair runs as int8 x int8 with the uint8
// operand's sign bit flipped while staging (u - 128); the binding layer passes the exact
// correction (128 * row or column sums of the other operand) to the epilogue as an offset.
#pragma once

#include <cstdint>
#include <type_traits>

#include <mma.h>

#include "common/cuda_check.h"
#include "common/math.h"
#include "common/problem.h"
#include "kernels/wmma/configs.h"
#include "kernels/wmma/wmma_gemm.h"

namespace tcgemm::wmma_gemm {

// One operand tile as the kernel reads it from global: `outer` rows of `inner` contiguous bytes.
struct TileSource {
  const uint8_t* base;  // element (outer 0, inner 0) of this tile
  int64_t ld;           // bytes between outer rows
  int outer_valid;      // rows inside the matrix
  int inner_valid;      // bytes inside the matrix
  uint32_t flip;        // XOR applied to every byte inside the matrix
};

// Reads 16 bytes at (outer, inner); bytes outside the matrix read as zero and are never touched.
__device__ __forceinline__ uint4 load_chunk(const TileSource& s, int outer, int inner) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (outer >= s.outer_valid || inner >= s.inner_valid) return v;
  const uint8_t* src = s.base + outer * s.ld + inner;
  if (inner + 16 <= s.inner_valid) {
    v = *reinterpret_cast<const uint4*>(src);
    v.x ^= s.flip, v.y ^= s.flip, v.z ^= s.flip, v.w ^= s.flip;
    return v;
  }
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int b = 0; b < 16; ++b) {
    if (inner + b < s.inner_valid) w[b / 4] |= static_cast<uint32_t>(src[b] ^ (s.flip & 0xff)) << (8 * (b % 4));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Stores one 16x16 accumulator fragment through a per-warp smem scratch so that each element
// meets the shared epilogue with its (m, n): wmma fragments do not expose their element mapping.
template <int ScratchLd, class Frag, class Epi>
__device__ __forceinline__ void store_fragment(const Frag& acc, int32_t* scratch, const GemmProblem& p, const Epi& epi,
                                               int row0, int col0, int lane) {
  nvcuda::wmma::store_matrix_sync(scratch, acc, ScratchLd, nvcuda::wmma::mem_row_major);
  __syncwarp();
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int r = it * 2 + (lane >> 4);
    const int c = lane & 15;
    const int row = row0 + r;
    const int col = col0 + c;
    if (row < p.m && col < p.n) {
      static_cast<typename Epi::OutT*>(p.d.ptr)[static_cast<int64_t>(row) * p.d.ld + col] =
          epi.full(scratch[r * ScratchLd + c], epi.row(row), epi.col(col), row, col);
    }
  }
  __syncwarp();
}

// Fragment layouts: a K-major smem tile is [rows][K] (A row_major, B col_major); otherwise [K][rows].
template <bool KMajor>
using LayoutA = std::conditional_t<KMajor, nvcuda::wmma::row_major, nvcuda::wmma::col_major>;
template <bool KMajor>
using LayoutB = std::conditional_t<KMajor, nvcuda::wmma::col_major, nvcuda::wmma::row_major>;

// Offset in a staged tile of the 16x16 fragment at (row, k) for the operand's smem layout.
template <bool KMajor, int Lds>
__device__ __forceinline__ int frag_offset(int row, int k) {
  return KMajor ? row * Lds + k : k * Lds + row;
}

// TileSource for the tile of an operand starting at (row0, k0).
__device__ __forceinline__ TileSource tile_source(const Operand& op, int rows, int k, int row0, int k0,
                                                  uint32_t flip) {
  const uint8_t* base = static_cast<const uint8_t*>(op.ptr);
  if (op.k_major()) return {base + row0 * op.stride_row + k0, op.stride_row, rows - row0, k - k0, flip};
  return {base + k0 * op.stride_k + row0, op.stride_k, k - k0, rows - row0, flip};
}

// Two blocks per SM (a 128-register cap): the other block's mma cover this one's staging,
// which beat staging the next chunk through registers in one 200-register block by 1.6-1.8x.
template <class Cfg, typename T, bool AKMajor, bool BKMajor, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, 2) wmma_gemm_kernel(const GemmProblem p, const Epi epi,
                                                                 uint32_t flip_a, uint32_t flip_b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 720
  namespace wmma = nvcuda::wmma;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* tile_a = smem;
  uint8_t* tile_b = smem + Cfg::kTileBytes;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int32_t* scratch = reinterpret_cast<int32_t*>(smem + 2 * Cfg::kTileBytes) + warp * 16 * Cfg::kScratchLd;
  const int warp_m0 = (warp / Cfg::kWarpsN) * Cfg::kFragsM * 16;
  const int warp_n0 = (warp % Cfg::kWarpsN) * Cfg::kFragsN * 16;

  const int tiles_n = ceil_div(p.n, Cfg::kBN);
  const int chunks = ceil_div(p.k, Cfg::kChunk);

  // The loop ends when the tile's first row is past M (the same test as tile < tiles_m * tiles_n):
  // testing against the parameter keeps the tile count out of a register, which at the 128-register
  // cap would be spilled.
  for (int tile = blockIdx.x;; tile += gridDim.x) {
    const int m0 = (tile / tiles_n) * Cfg::kBM;
    if (m0 >= p.m) break;
    const int n0 = (tile % tiles_n) * Cfg::kBN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc[Cfg::kFragsM][Cfg::kFragsN];
#pragma unroll
    for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0);

    for (int chunk = 0; chunk < chunks; ++chunk) {
      const TileSource sa = tile_source(p.a, p.m, p.k, m0, chunk * Cfg::kChunk, flip_a);
      const TileSource sb = tile_source(p.b, p.n, p.k, n0, chunk * Cfg::kChunk, flip_b);
      __syncthreads();  // every warp is done reading the previous chunk
#pragma unroll
      for (int i = 0; i < Cfg::kChunksPerThread; ++i) {
        const int idx = i * Cfg::kThreads + threadIdx.x;
        const int outer = idx / (Cfg::kTileDim / 16);
        const int inner = (idx % (Cfg::kTileDim / 16)) * 16;
        const int offset = outer * Cfg::kLds + inner;
        *reinterpret_cast<uint4*>(tile_a + offset) = load_chunk(sa, outer, inner);
        *reinterpret_cast<uint4*>(tile_b + offset) = load_chunk(sb, outer, inner);
      }
      __syncthreads();

#pragma unroll
      for (int kk = 0; kk < Cfg::kChunk; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA<AKMajor>> a[Cfg::kFragsM];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB<BKMajor>> b[Cfg::kFragsN];
#pragma unroll
        for (int i = 0; i < Cfg::kFragsM; ++i)
          wmma::load_matrix_sync(a[i], reinterpret_cast<const T*>(tile_a) +
                                           frag_offset<AKMajor, Cfg::kLds>(warp_m0 + i * 16, kk), Cfg::kLds);
#pragma unroll
        for (int j = 0; j < Cfg::kFragsN; ++j)
          wmma::load_matrix_sync(b[j], reinterpret_cast<const T*>(tile_b) +
                                           frag_offset<BKMajor, Cfg::kLds>(warp_n0 + j * 16, kk), Cfg::kLds);
#pragma unroll
        for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kFragsN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }

#pragma unroll
    for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kFragsN; ++j)
        store_fragment<Cfg::kScratchLd>(acc[i][j], scratch, p, epi, m0 + warp_m0 + i * 16, n0 + warp_n0 + j * 16,
                                        lane);
  }
#endif
}

// The fallback for devices that cannot give the main kernel its shared memory: one warp per
// 16x16 output tile, 32 bytes of K staged per step with plain byte loads, so any strides work.
constexpr int kSimpleWarps = 4;
constexpr int kSimpleK = 32;
constexpr int kSimpleScratchLd = 20;
constexpr int kSimpleWarpSmem = 2 * 16 * kSimpleK + 16 * kSimpleScratchLd * 4;

template <typename T, class Epi>
__global__ void __launch_bounds__(32 * kSimpleWarps) wmma_gemm_simple_kernel(const GemmProblem p, const Epi epi,
                                                                            uint32_t flip_a, uint32_t flip_b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 720
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(128) uint8_t smem[kSimpleWarps * kSimpleWarpSmem];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  uint8_t* tile_a = smem + warp * kSimpleWarpSmem;  // [16 rows of M][32 K]
  uint8_t* tile_b = tile_a + 16 * kSimpleK;           // [16 rows of N][32 K]
  int32_t* scratch = reinterpret_cast<int32_t*>(tile_b + 16 * kSimpleK);
  const uint8_t* a = static_cast<const uint8_t*>(p.a.ptr);
  const uint8_t* b = static_cast<const uint8_t*>(p.b.ptr);

  const int tiles_n = ceil_div(p.n, 16);
  const int tiles = ceil_div(p.m, 16) * tiles_n;
  for (int tile = blockIdx.x * kSimpleWarps + warp; tile < tiles; tile += gridDim.x * kSimpleWarps) {
    const int m0 = (tile / tiles_n) * 16;
    const int n0 = (tile % tiles_n) * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc;
    wmma::fill_fragment(acc, 0);
    for (int k0 = 0; k0 < p.k; k0 += kSimpleK) {
      // Lane l stages 16 bytes of row l/2 for each operand; outside the matrix reads as zero.
      const int r = lane >> 1;
      const int kb = k0 + (lane & 1) * 16;
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const int kk = kb + e;
        const bool k_ok = kk < p.k;
        uint8_t va = 0, vb = 0;
        if (k_ok && m0 + r < p.m) va = a[(m0 + r) * p.a.stride_row + kk * p.a.stride_k] ^ (flip_a & 0xff);
        if (k_ok && n0 + r < p.n) vb = b[(n0 + r) * p.b.stride_row + kk * p.b.stride_k] ^ (flip_b & 0xff);
        tile_a[r * kSimpleK + (lane & 1) * 16 + e] = va;
        tile_b[r * kSimpleK + (lane & 1) * 16 + e] = vb;
      }
      __syncwarp();
#pragma unroll
      for (int kk = 0; kk < kSimpleK; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, reinterpret_cast<const T*>(tile_a) + kk, kSimpleK);
        wmma::load_matrix_sync(fb, reinterpret_cast<const T*>(tile_b) + kk, kSimpleK);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      __syncwarp();
    }
    store_fragment<kSimpleScratchLd>(acc, scratch, p, epi, m0, n0, lane);
  }
#endif
}

}  // namespace tcgemm::wmma_gemm

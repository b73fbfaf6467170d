// How fast a W4-kernel-shaped stream reads a packed 4-bit weight (sm_90), by its layout in
// global memory: the ceiling of the W4 kernel (docs/design/int4.md), without its unpacking or mma.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I csrc -o /tmp/tile_probe scripts/dev/tile_probe.cu && /tmp/tile_probe
//
// The weight is N x K/2 bytes. Blocks of 128 weight rows (tiles; along K split over `split`
// blocks so that about two blocks per SM run, as the W4 plans do), each streaming its K blocks
// (128 values, 64 bytes a row) through a ring of S stages: one producer thread issues the copies,
// 8 consumer warps read each stage out of shared memory and hand it back. Per stage, with "+x",
// also a 4 KiB tile of a small (L2-resident) x, as the W4 kernel's 32-row tiles do. Ways:
//   rows T xG:   the weight as stored today, [N][K/2] row-major: a 2-D TMA box of 128 rows by
//                64 G bytes (G K blocks per stage), T = S stages;
//   tiles T xG:  the weight tile-major, [N/128][K/128][128][64] (each tile's K blocks one after
//                the other, each K block's 128 rows of 64 bytes contiguous): one cp.async.bulk of
//                8 G KiB per stage.
// Device time per read from a CUDA graph of rotated copies (3x the L2 at least), median of 7.
#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "ptx/cache_policy.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"
#include "graph_time.cuh"  // scripts/dev
#include "probe_ring.cuh"  // scripts/dev

namespace ptx = tcgemm::ptx;
using tcgemm_probe::ProbeRing;
using tcgemm_probe::ProbeSetup;
using tcgemm_probe::sink_if;

constexpr int kConsumers = 256, kRows = 128, kKBlockBytes = 64, kXBytes = 4096;

// Block (blockIdx.x = share of K, blockIdx.y = tile). tiled: the weight tile-major, else row-major
// through map_w. With_x: x's 4 KiB per stage from `x` (64 KiB, read over and over).
template <int S, int G, bool Tiled, bool WithX>
__global__ void __launch_bounds__(kConsumers + 32, 2)
    tile_kernel(const __grid_constant__ CUtensorMap map_w, const uint8_t* w, const uint8_t* x, int k_blocks,
                int kb_per_split, uint32_t* sink) {
  constexpr int kW = kRows * kKBlockBytes * G;
  constexpr int kStage = kW + (WithX ? kXBytes * G : 0);
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ ProbeRing<S> bars;
  const int kb0 = blockIdx.x * kb_per_split, kb1 = min(k_blocks, kb0 + kb_per_split);
  const int stages = (kb1 - kb0 + G - 1) / G;
  if (threadIdx.x == 0) bars.init(kConsumers / 32);
  __syncthreads();
  if (threadIdx.x / 32 == kConsumers / 32) {
    if (threadIdx.x % 32 == 0) {
      const uint64_t stream = ptx::l2_policy_evict_first(), keep = ptx::l2_policy_evict_last();
      for (int i = 0; i < stages; ++i) {
        const int s = bars.acquire(i, kStage), kb = kb0 + i * G;
        uint8_t* dst = ring + s * kStage;
        if constexpr (Tiled) {
          const int64_t off = (int64_t{blockIdx.y} * k_blocks + kb) * kRows * kKBlockBytes;
          ptx::bulk_load(dst, w + off, kW, &bars.full[s], stream);
        } else {
          ptx::tma_load_2d(dst, &map_w, &bars.full[s], kb * kKBlockBytes, blockIdx.y * kRows, stream);
        }
        if constexpr (WithX) ptx::bulk_load(dst + kW, x + (kb % 8) * kXBytes, kXBytes * G, &bars.full[s], keep);
      }
    }
    return;
  }
  uint32_t acc = 0;
  for (int i = 0; i < stages; ++i) bars.consume(i, ring + (i % S) * kStage, kStage, threadIdx.x, kConsumers, acc);
  sink_if(acc, sink);
}

// [n][k_bytes] bytes read in unswizzled boxes of [128][box_bytes].
CUtensorMap rows_map(const uint8_t* w, int64_t n, int64_t k_bytes, int box_bytes) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    TCGEMM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                                       &found));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k_bytes), static_cast<cuuint64_t>(n)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes), static_cast<cuuint32_t>(kRows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(w), dims, strides, box, elem,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (%d)\n", static_cast<int>(r));
    std::exit(1);
  }
  return map;
}

struct Way {
  std::string name;
  std::function<void(const uint8_t*, int64_t n, int64_t k_bytes, cudaStream_t)> launch;
};

template <int S, int G, bool Tiled, bool WithX>
Way way(int sms, const uint8_t* x, uint32_t* sink) {
  constexpr int smem = S * (kRows * kKBlockBytes * G + (WithX ? kXBytes * G : 0));
  auto kernel = tile_kernel<S, G, Tiled, WithX>;
  TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::string name = std::string(Tiled ? "tiles " : "rows ") + std::to_string(S) + " x" + std::to_string(G) +
                     (WithX ? " +x" : "");
  return {name, [=](const uint8_t* w, int64_t n, int64_t k_bytes, cudaStream_t st) {
            const int tiles = static_cast<int>(n / kRows), k_blocks = static_cast<int>(k_bytes / kKBlockBytes);
            // About two blocks per SM, as the W4 plans aim for; at least 4 stages a block.
            int split = std::max(1, (2 * sms + tiles / 2) / tiles);
            split = std::min(split, std::max(1, k_blocks / (4 * G)));
            int kbps = (k_blocks + split - 1) / split;
            kbps = (kbps + G - 1) / G * G;
            split = (k_blocks + kbps - 1) / kbps;
            CUtensorMap map{};
            if (!Tiled) map = rows_map(w, n, k_bytes, 64 * G);
            kernel<<<dim3(split, tiles), kConsumers + 32, smem, st>>>(map, w, x, k_blocks, kbps, sink);
            TCGEMM_CHECK_LAUNCH();
          }};
}

int main() {
  const ProbeSetup setup;
  const int sms = setup.sms;
  uint32_t* sink = setup.sink;
  cudaStream_t st = setup.stream;
  uint8_t* x = nullptr;
  TCGEMM_CUDA_CHECK(cudaMalloc(&x, 8 * kXBytes * 2));
  TCGEMM_CUDA_CHECK(cudaMemset(x, 0x33, 8 * kXBytes * 2));

  std::vector<Way> ways = {way<8, 1, false, true>(sms, x, sink),  way<8, 1, false, false>(sms, x, sink),
                           way<4, 2, false, true>(sms, x, sink),  way<8, 1, true, true>(sms, x, sink),
                           way<8, 1, true, false>(sms, x, sink),  way<4, 2, true, true>(sms, x, sink),
                           way<12, 1, false, true>(sms, x, sink), way<12, 1, true, true>(sms, x, sink)};
  // Packed 4-bit weights (N x K/2 bytes) of the decode layers.
  const std::vector<std::pair<const char*, std::pair<int64_t, int64_t>>> sizes = {
      {"8B o", {4096, 2048}},      {"8B qkv", {6144, 2048}},   {"8B gate+up", {28672, 2048}},
      {"8B down", {4096, 7168}},   {"70B o", {8192, 4096}},    {"70B qkv", {10240, 4096}},
      {"70B down", {8192, 14336}}};
  constexpr int kReads = 24, kReplays = 7;
  std::printf("GPU %s, %d SMs, L2 %d MB; us per read of the packed weight (TB/s)\n", setup.prop.name, sms,
              setup.l2 >> 20);
  std::printf("%-11s", "layer");
  for (const Way& w : ways) std::printf(" | %-15s", w.name.c_str());
  std::printf("\n");
  for (const auto& size : sizes) {
    const int64_t n = size.second.first, kb = size.second.second, bytes = n * kb;
    std::printf("%-11s", size.first);
    for (const Way& w : ways) {
      const float us = graph_us_per_launch(
          st, kReads, [&](int i) { w.launch(setup.copy(bytes, i), n, kb, st); }, kReplays);
      std::printf(" | %6.2f (%4.2f)  ", us, bytes / (us * 1e-6) / 1e12);
    }
    std::printf("\n");
  }
  TCGEMM_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}

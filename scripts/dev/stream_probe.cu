// How fast the SMs can stream a buffer they read once (sm_90): the ceiling of the decode kernels,
// which at a few rows are a stream of the weight (docs/design/skinny.md).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I csrc -o /tmp/stream_probe scripts/dev/stream_probe.cu && /tmp/stream_probe
//
// Per buffer size (the int8 weights of the Llama-3 decode layers) and way of reading: the device
// time per read of the whole buffer, from a CUDA graph of 24 reads of rotated copies (at least 3x
// the L2 in all), median of 7 replays; and the bytes over that time.
//   ldg D xB:  ld.global.nc.L1::no_allocate 16-byte loads with an evict_first L2 policy, D loads per
//              thread issued before any is used, B blocks of 256 threads per SM, each block reading
//              a contiguous share of the buffer (what the skinny kernel does, without the mma);
//   bulk S xKB xB: B blocks per SM; in each, one thread issues cp.async.bulk copies of KB kilobytes
//              into a ring of S stages, and 8 warps read every stage out of shared memory and
//              release it (what a TMA-fed kernel would do, without the mma);
//   empty:     a kernel that does nothing, the per-kernel cost of a graph.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "ptx/cache_policy.cuh"
#include "ptx/ld_global.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"
#include "graph_time.cuh"  // scripts/dev
#include "probe_ring.cuh"  // scripts/dev

namespace ptx = tcgemm::ptx;
using tcgemm_probe::ProbeRing;
using tcgemm_probe::ProbeSetup;
using tcgemm_probe::sink_if;

constexpr int kThreads = 256;


template <int D>
__global__ void __launch_bounds__(kThreads) ldg_kernel(const uint8_t* src, int64_t share, uint32_t* sink) {
  const uint8_t* base = src + blockIdx.x * share;
  const uint64_t policy = ptx::l2_policy_evict_first();
  uint32_t x = 0;
  for (int64_t off = threadIdx.x * 16; off < share; off += int64_t{kThreads} * 16 * D) {
    uint4 v[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int64_t o = off + int64_t{d} * kThreads * 16;
      v[d] = o < share ? ptx::ld_global_stream_v4(base + o, policy) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int d = 0; d < D; ++d) x ^= v[d].x ^ v[d].y ^ v[d].z ^ v[d].w;
  }
  sink_if(x, sink);
}

template <int S, int KB>
__global__ void __launch_bounds__(kThreads + 32) bulk_kernel(const uint8_t* src, int64_t share, uint32_t* sink) {
  constexpr int kStage = KB * 1024;
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ ProbeRing<S> bars;
  const uint8_t* base = src + blockIdx.x * share;
  const int64_t pieces = (share + kStage - 1) / kStage;
  if (threadIdx.x == 0) bars.init(kThreads / 32);
  __syncthreads();
  if (threadIdx.x / 32 == kThreads / 32) {
    if (threadIdx.x % 32 == 0) {
      const uint64_t policy = ptx::l2_policy_evict_first();
      for (int64_t i = 0; i < pieces; ++i) {
        const uint32_t n = static_cast<uint32_t>(min(int64_t{kStage}, share - i * kStage));
        const int s = bars.acquire(i, n);
        ptx::bulk_load(ring + s * kStage, base + i * kStage, n, &bars.full[s], policy);
      }
    }
    return;
  }
  uint32_t x = 0;
  for (int64_t i = 0; i < pieces; ++i) {
    const int n = static_cast<int>(min(int64_t{kStage}, share - i * kStage));
    bars.consume(i, ring + (i % S) * kStage, n, threadIdx.x, kThreads, x);
  }
  sink_if(x, sink);
}

__global__ void empty_kernel() {}

struct Way {
  std::string name;
  // Launches one read of `bytes` at src; returns the bytes it read (each block's share is a
  // multiple of 16 bytes; the few bytes past the last share are not read).
  std::function<int64_t(const uint8_t*, int64_t, cudaStream_t)> launch;
};

template <int D>
Way ldg_way(int blocks_per_sm, int sms, uint32_t* sink) {
  return {"ldg " + std::to_string(D) + " x" + std::to_string(blocks_per_sm),
          [=](const uint8_t* src, int64_t bytes, cudaStream_t st) {
            const int grid = blocks_per_sm * sms;
            const int64_t share = bytes / grid / 16 * 16;
            ldg_kernel<D><<<grid, kThreads, 0, st>>>(src, share, sink);
            TCGEMM_CHECK_LAUNCH();
            return share * grid;
          }};
}

template <int S, int KB>
Way bulk_way(int blocks_per_sm, int sms, uint32_t* sink) {
  const int smem = S * KB * 1024;
  TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(bulk_kernel<S, KB>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return {"bulk " + std::to_string(S) + " x" + std::to_string(KB) + "K x" + std::to_string(blocks_per_sm),
          [=](const uint8_t* src, int64_t bytes, cudaStream_t st) {
            const int grid = blocks_per_sm * sms;
            const int64_t share = bytes / grid / 16 * 16;
            bulk_kernel<S, KB><<<grid, kThreads + 32, smem, st>>>(src, share, sink);
            TCGEMM_CHECK_LAUNCH();
            return share * grid;
          }};
}

int main() {
  const ProbeSetup setup;
  const int sms = setup.sms;
  uint32_t* sink = setup.sink;
  cudaStream_t st = setup.stream;

  std::vector<Way> ways = {ldg_way<4>(2, sms, sink),        ldg_way<8>(2, sms, sink),
                           ldg_way<8>(4, sms, sink),        ldg_way<16>(2, sms, sink),
                           bulk_way<4, 32>(1, sms, sink),   bulk_way<6, 32>(1, sms, sink),
                           bulk_way<8, 16>(1, sms, sink),   bulk_way<4, 16>(2, sms, sink),
                           bulk_way<12, 16>(1, sms, sink)};
  // int8 weights (N x K) of the decode layers: 8B o, qkv, down, gate+up; 70B o, qkv, down.
  const std::vector<std::pair<const char*, int64_t>> sizes = {
      {"4096x4096", 4096LL * 4096},     {"6144x4096", 6144LL * 4096},   {"4096x14336", 4096LL * 14336},
      {"28672x4096", 28672LL * 4096},   {"8192x8192", 8192LL * 8192},   {"10240x8192", 10240LL * 8192},
      {"8192x28672", 8192LL * 28672}};
  constexpr int kReads = 24, kReplays = 7;
  auto time_graph = [&](const std::function<void(int)>& one) { return graph_us_per_launch(st, kReads, one, kReplays); };

  std::printf("GPU %s, %d SMs, L2 %d MB; us per read of the buffer (TB/s)\n", setup.prop.name, sms, setup.l2 >> 20);
  std::printf("empty kernel in a graph: %.2f us\n", time_graph([&](int) {
    empty_kernel<<<sms, 32, 0, st>>>();
    TCGEMM_CHECK_LAUNCH();
  }));
  std::printf("%-12s", "N x K");
  for (const Way& w : ways) std::printf(" | %-16s", w.name.c_str());
  std::printf("\n");
  for (const auto& size : sizes) {
    const char* name = size.first;
    const int64_t bytes = size.second;
    std::printf("%-12s", name);
    for (const Way& w : ways) {
      int64_t read = 0;
      const float us = time_graph([&](int i) { read = w.launch(setup.copy(bytes, i), bytes, st); });
      std::printf(" | %6.2f (%5.2f)   ", us, read / (us * 1e-6) / 1e12);
    }
    std::printf("\n");
  }
  TCGEMM_CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}

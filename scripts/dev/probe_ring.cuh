// The ring of the standalone probes' copy kernels (stream_probe.cu, tile_probe.cu): S stages in
// shared memory that one producer thread fills with bulk copies while whole warps of consumers
// read each stage out and hand it back; a sink that keeps their reads from being dropped; and the
// host set-up both probes share (ProbeSetup).
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"

namespace tcgemm_probe {

namespace ptx = tcgemm::ptx;

// Stores x only when it matches nothing likely, so that the loads that made it stay.
__device__ __forceinline__ void sink_if(uint32_t x, uint32_t* sink) {
  if (x == 0x9e3779b9u) sink[threadIdx.x] = x;
}

template <int S>
struct ProbeRing {
  uint64_t full[S], empty[S];

  // By thread 0 of the block, before a block barrier: consumer_warps arrivals free a slot.
  __device__ void init(int consumer_warps) {
    for (int s = 0; s < S; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], consumer_warps);
    }
    ptx::mbarrier_fence_init();
  }

  // Producer, piece i: waits for its slot to be free (from the second round on) and arms the
  // slot's "full" barrier for `bytes`; returns the slot, into which the caller issues the copies.
  __device__ int acquire(int64_t i, uint32_t bytes) {
    const int s = static_cast<int>(i % S);
    if (i >= S) ptx::mbarrier_wait(&empty[s], static_cast<uint32_t>((i / S - 1) & 1));
    ptx::mbarrier_arrive_expect_tx(&full[s], bytes);
    return s;
  }

  // Consumer thread `thread` of `threads`, piece i: its 16-byte pieces of the slot's first `bytes`
  // (at `slot_base`) folded into acc once they landed, then the slot handed back by each warp.
  __device__ void consume(int64_t i, const uint8_t* slot_base, int bytes, int thread, int threads, uint32_t& acc) {
    const int s = static_cast<int>(i % S);
    ptx::mbarrier_wait(&full[s], static_cast<uint32_t>((i / S) & 1));
    for (int off = thread * 16; off < bytes; off += threads * 16) {
      const int4 v = ptx::ld_shared_v4(ptx::smem_addr(slot_base + off));
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncwarp();
    if (thread % 32 == 0) ptx::mbarrier_arrive(&empty[s]);
  }
};

// The device, a 1 GiB pool of nonzero bytes that the probes read rotated copies of (past L2), the
// kernels' sink and a stream.
struct ProbeSetup {
  static constexpr int64_t kPoolBytes = int64_t{1} << 30;
  int sms = 0, l2 = 0;
  cudaDeviceProp prop{};
  uint8_t* pool = nullptr;
  uint32_t* sink = nullptr;
  cudaStream_t stream{};

  ProbeSetup() {
    int dev = 0;
    TCGEMM_CUDA_CHECK(cudaGetDevice(&dev));
    TCGEMM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    TCGEMM_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    TCGEMM_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    TCGEMM_CUDA_CHECK(cudaMalloc(&pool, kPoolBytes));
    TCGEMM_CUDA_CHECK(cudaMalloc(&sink, 4096));
    TCGEMM_CUDA_CHECK(cudaMemset(pool, 0x5a, kPoolBytes));
    TCGEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }

  // Copy i (of enough copies of `bytes` to cover three times the L2) of the pool, 4 KiB aligned.
  const uint8_t* copy(int64_t bytes, int i) const {
    const int64_t stride = (bytes + 4095) / 4096 * 4096;
    const int64_t copies = std::min<int64_t>(kPoolBytes / stride, std::max<int64_t>(3, (3LL * l2 + bytes - 1) / bytes));
    return pool + (i % copies) * stride;
  }
};

}  // namespace tcgemm_probe

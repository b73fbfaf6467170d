// The ring of the standalone probes' copy kernels (stream_probe.cu, tile_probe.cu): S stages in
// shared memory that one producer thread fills with bulk copies while whole warps of consumers
// read each stage out and hand it back; and a sink that keeps their reads from being dropped.
#pragma once

#include <cstdint>

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

}  // namespace tcgemm_probe

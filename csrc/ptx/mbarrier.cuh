// mbarrier (sm_90): shared-memory barriers that count thread arrivals and, for TMA, bytes.
// A phase completes when its pending arrivals and transaction bytes both reach zero; waiters
// name the phase by its parity.
#pragma once

#include <cstdint>

#include "ptx/smem.cuh"

namespace tcgemm::ptx {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TCGEMM_PTX_SM90 1
#endif

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
#ifdef TCGEMM_PTX_SM90
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
#endif
}

// Makes initialized barriers visible to the async proxy (TMA) and the rest of the cluster.
__device__ __forceinline__ void mbarrier_fence_init() {
#ifdef TCGEMM_PTX_SM90
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival, and `bytes` more transaction bytes the phase must see before it completes.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#ifdef TCGEMM_PTX_SM90
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#ifdef TCGEMM_PTX_SM90
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#endif
}

// Blocks until the phase with this parity has completed. A fresh barrier is in phase 0, and a
// wait for parity 1 returns at once (the phase before it counts as complete).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef TCGEMM_PTX_SM90
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}

}  // namespace tcgemm::ptx

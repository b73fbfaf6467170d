// Prefetches: bring global memory closer with no register to wait on.
//   prefetch_l2_bulk (cp.async.bulk.prefetch.L2, sm_90+): `bytes` (a multiple of 16) from a
//     16-byte aligned global address into L2 with one instruction; the loads that later read them
//     are served from L2. A no-op before sm_90.
//   prefetch_l2 (prefetch.global.L2): the cache line holding a global address into L2.
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

}  // namespace tcgemm::ptx

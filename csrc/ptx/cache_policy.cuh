// createpolicy (sm_80+): L2 eviction-priority policies for loads and stores that take an
// .L2::cache_hint operand.
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

// Lines touched under this policy are the first to go: data written once and not read again.
__device__ __forceinline__ uint64_t l2_policy_evict_first() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

// Lines touched under this policy stay longest: data many blocks read again.
__device__ __forceinline__ uint64_t l2_policy_evict_last() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

}  // namespace tcgemm::ptx

// Shared-memory addressing for PTX instructions that take a 32-bit .shared address.
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

// Converts a generic pointer into shared memory to the .shared window address.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace tcgemm::ptx

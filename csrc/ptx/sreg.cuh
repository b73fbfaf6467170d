// Special registers.
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

// %nsmid: an upper bound of %smid, the number of SMs on the GPUs this code targets (SM ids may
// have gaps, so it is not an exact count; used only where an estimate is enough).
__device__ __forceinline__ uint32_t nsmid() {
  uint32_t n;
  asm("mov.u32 %0, %%nsmid;\n" : "=r"(n));
  return n;
}

// %dynamic_smem_size: the bytes of dynamic shared memory the block was launched with.
__device__ __forceinline__ uint32_t dynamic_smem_size() {
  uint32_t n;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(n));
  return n;
}

}  // namespace tcgemm::ptx

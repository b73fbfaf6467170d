// ldmatrix (sm_75+): a warp loads 8x8 tiles of 16-bit elements from shared memory into registers.
// For int8 data each 16-bit element is a pair of consecutive K bytes, which is exactly the
// mma.m16n8k32 fragment layout for K-major operands.
#pragma once

#include <cstdint>

#include "ptx/smem.cuh"

namespace tcgemm::ptx {

// Four 8x8 tiles; lane l supplies the row address of row (l % 8) of tile (l / 8).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_ptr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_ptr)));
#endif
}

}  // namespace tcgemm::ptx

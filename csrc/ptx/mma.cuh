// mma.sync m16n8k32 with 8-bit integer operands (sm_80+), int32 accumulation that wraps.
// Fragment layouts (g = lane / 4, t = lane % 4), each register holding 4 consecutive K bytes:
//   A: a0 (row g, k 4t..), a1 (row g+8, k 4t..), a2 (row g, k 16+4t..), a3 (row g+8, k 16+4t..)
//   B: b0 (col g, k 4t..), b1 (col g, k 16+4t..)
//   C: c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, cols 2t, 2t+1)
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

// D = A * B + D; ASigned / BSigned pick .s8 or .u8 for each operand independently.
template <bool ASigned, bool BSigned>
__device__ __forceinline__ void mma_m16n8k32(int32_t (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TCGEMM_MMA_M16N8K32(ATYPE, BTYPE)                                                         \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." ATYPE "." BTYPE ".s32 "                   \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                 \
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
  if constexpr (ASigned && BSigned) {
    TCGEMM_MMA_M16N8K32("s8", "s8");
  } else if constexpr (ASigned) {
    TCGEMM_MMA_M16N8K32("s8", "u8");
  } else if constexpr (BSigned) {
    TCGEMM_MMA_M16N8K32("u8", "s8");
  } else {
    TCGEMM_MMA_M16N8K32("u8", "u8");
  }
#undef TCGEMM_MMA_M16N8K32
#endif
}

}  // namespace tcgemm::ptx

// wgmma (sm_90a): the warpgroup-wide asynchronous tensor-core MMA, its shared-memory matrix
// descriptor, and its ordering instructions (fence, commit, wait).
#pragma once

#include <cstdint>

#include "ptx/smem.cuh"

namespace tcgemm::ptx {

#include "ptx/wgmma_int8_operands.inc"

// wgmma.mma_async.sync.aligned.m64nNk32.s32.<ATYPE>.<BTYPE> with both operands read from shared
// memory through matrix descriptors; accumulate == false computes D = A*B (scale-d = 0).
#define TCGEMM_WGMMA_INT8(N, ATYPE, BTYPE)                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TCGEMM_WGMMA_SCALE_##N ", 0;\n"             \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.s32." ATYPE "." BTYPE " "           \
               TCGEMM_WGMMA_D_##N ", " TCGEMM_WGMMA_AB_##N ", p;\n}\n"                       \
               : TCGEMM_WGMMA_OUT_##N(d)                                                        \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))

#define TCGEMM_WGMMA_INT8_SIGNS(N)                              \
  if constexpr (ASigned && BSigned) TCGEMM_WGMMA_INT8(N, "s8", "s8"); \
  else if constexpr (ASigned) TCGEMM_WGMMA_INT8(N, "s8", "u8");       \
  else if constexpr (BSigned) TCGEMM_WGMMA_INT8(N, "u8", "s8");       \
  else TCGEMM_WGMMA_INT8(N, "u8", "u8")

// One m64nNk32 int8 wgmma of the warpgroup. Each thread holds N/2 int32 accumulators in the
// layout of the PTX ISA's "wgmma .m64nNk32 D fragment": d[4j + 2h + e] is row
// 16*warp + lane/4 + 8h, column 8j + 2*(lane%4) + e.
template <int N, bool ASigned, bool BSigned>
struct WgmmaInt8 {
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "add N to SHAPES in csrc/ptx/gen_wgmma_int8.py");
  static constexpr int kAccRegs = N / 2;

  __device__ __forceinline__ static void mma(uint64_t desc_a, uint64_t desc_b, int32_t (&d)[N / 2],
                                             bool accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if constexpr (N == 32) {
      TCGEMM_WGMMA_INT8_SIGNS(32);
    } else if constexpr (N == 64) {
      TCGEMM_WGMMA_INT8_SIGNS(64);
    } else if constexpr (N == 128) {
      TCGEMM_WGMMA_INT8_SIGNS(128);
    } else {
      TCGEMM_WGMMA_INT8_SIGNS(256);
    }
#endif
  }
};

// The same with A from registers: a[0..3] are the thread's four 32-bit words of A's m64k32
// fragment ("wgmma .m64nNk32 register fragment A"): a[2h + j] holds row 16*warp + lane/4 + 8j,
// columns 16h + 4*(lane%4) .. + 3. A's registers must not change until the wgmma has completed.
#define TCGEMM_WGMMA_INT8_RS(N, ATYPE, BTYPE)                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " TCGEMM_WGMMA_RS_SCALE_##N ", 0;\n"         \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.s32." ATYPE "." BTYPE " "            \
               TCGEMM_WGMMA_D_##N ", " TCGEMM_WGMMA_RS_AB_##N ", p;\n}\n"                    \
               : TCGEMM_WGMMA_OUT_##N(d)                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),                       \
                 "r"(static_cast<int>(accumulate)))

// One m64nNk32 int8 wgmma with A from registers (the layout above; int8, or uint8 where ASigned
// is false) and B from shared memory; D as in WgmmaInt8.
template <int N, bool BSigned, bool ASigned = true>
struct WgmmaInt8RegA {
  static_assert(N == 32 || N == 64 || N == 128 || N == 256, "add N to SHAPES in csrc/ptx/gen_wgmma_int8.py");
  static constexpr int kAccRegs = N / 2;

  __device__ __forceinline__ static void mma(const uint32_t (&a)[4], uint64_t desc_b, int32_t (&d)[N / 2],
                                             bool accumulate) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TCGEMM_WGMMA_INT8_RS_N(ATYPE, BTYPE)                      \
  if constexpr (N == 32) TCGEMM_WGMMA_INT8_RS(32, ATYPE, BTYPE);   \
  else if constexpr (N == 64) TCGEMM_WGMMA_INT8_RS(64, ATYPE, BTYPE); \
  else if constexpr (N == 128) TCGEMM_WGMMA_INT8_RS(128, ATYPE, BTYPE); \
  else TCGEMM_WGMMA_INT8_RS(256, ATYPE, BTYPE)
    if constexpr (ASigned && BSigned) {
      TCGEMM_WGMMA_INT8_RS_N("s8", "s8");
    } else if constexpr (ASigned) {
      TCGEMM_WGMMA_INT8_RS_N("s8", "u8");
    } else if constexpr (BSigned) {
      TCGEMM_WGMMA_INT8_RS_N("u8", "s8");
    } else {
      TCGEMM_WGMMA_INT8_RS_N("u8", "u8");
    }
#undef TCGEMM_WGMMA_INT8_RS_N
#endif
  }
};

#undef TCGEMM_WGMMA_INT8_RS
#undef TCGEMM_WGMMA_INT8_SIGNS
#undef TCGEMM_WGMMA_INT8

// Matrix descriptor of a K-major tile written by TMA with 128-byte swizzle: rows of 128 bytes,
// 8-row (1024-byte) swizzle atoms stacked along M/N. The tile must start 1024-byte aligned so
// the hardware's swizzle (a function of address bits 4-9) matches the one TMA wrote; a K offset
// inside the 128-byte row is then a plain start-address offset (see wgmma_desc_advance).
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset >> 4 (unused for swizzled K-major; 1 by convention)
//   bits 32-45  stride-dimension byte offset >> 4: 1024 bytes from one 8-row atom to the next
//   bits 62-63  swizzle mode, 1 = 128-byte
__device__ __forceinline__ uint64_t wgmma_desc_k_major_sw128(const void* smem_tile) {
  const uint64_t start = (smem_addr(smem_tile) & 0x3FFFF) >> 4;
  return start | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// The same descriptor moved `bytes` (a multiple of 16) further along the tile. Shared-memory
// addresses stay below 2^18, so the start-address field never carries into bit 14 and the upper
// word stays as it is: a 32-bit add on the lower word (a 64-bit add cost ptxas a carry chain and
// register moves per descriptor).
__device__ __forceinline__ uint64_t wgmma_desc_advance(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & ~uint64_t{0xFFFFFFFFu}) | lo;
}

// wgmma.fence: orders this warpgroup's register and shared-memory accesses before the wgmma
// that follow; needed before the first wgmma and whenever other instructions touched the
// accumulators.
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// Closes the wgmma issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit_group() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most `Pending` committed wgmma groups are still running. The accumulators
// (Sets stacked m64 pieces) must be passed so the compiler keeps every read and write of them
// after the wait.
template <int Pending, int Sets, int Regs>
__device__ __forceinline__ void wgmma_wait_group(int32_t (&acc)[Sets][Regs]) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
#pragma unroll
  for (int s = 0; s < Sets; ++s)
#pragma unroll
    for (int i = 0; i < Regs; ++i) asm volatile("" : "+r"(acc[s][i])::"memory");
#endif
}

// Keeps the compiler from moving reads or writes of wgmma register operands (A fragments) across
// this point: after the wait that retires the wgmma reading them, before they are written again.
template <int Steps>
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&a)[Steps][4]) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma unroll
  for (int s = 0; s < Steps; ++s)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[s][i])::"memory");
#endif
}

}  // namespace tcgemm::ptx

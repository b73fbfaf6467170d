// cp.async (sm_80+): asynchronous 16-byte global->shared copies grouped into commit groups.
#pragma once

#include <cstdint>

#include "ptx/smem.cuh"

namespace tcgemm::ptx {

// Copies src_bytes (0..16) from global and zero-fills the rest of the 16-byte shared destination.
// Both addresses must be 16-byte aligned; with src_bytes == 0 nothing is read from global.
// .cg bypasses L1: each byte of a GEMM tile is read once per block, L2 is where reuse happens.
__device__ __forceinline__ void cp_async_16_zfill(void* smem_dst, const void* gmem_src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
#endif
}

// Copies 16 bytes that are known to lie inside the source: no size operand, no predicate math.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src) : "memory");
#endif
}

// cp_async_16 with L2::256B: L2 fetches the source's whole 256-byte aligned block from memory
// (a stream whose neighbouring bytes other warps read next).
__device__ __forceinline__ void cp_async_16_l2_256(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src)
               : "memory");
#endif
}

// Closes the group of cp.async issued since the previous commit.
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `Pending` committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

}  // namespace tcgemm::ptx

// TMA (sm_90): bulk tensor copies between global and shared memory driven by a CUtensorMap that
// the host encoded (kernels/sm90/sm90_tensor_map.h) and passes as a __grid_constant__ parameter.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "ptx/smem.cuh"

namespace tcgemm::ptx {

// Starts loading the box at (c0 = innermost coordinate, c1) into shared memory; the copy adds
// its bytes to the mbarrier's transaction count when it lands. Elements outside the tensor
// arrive as zeros (and still count). `l2_policy` comes from ptx/cache_policy.cuh.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(smem_addr(smem_dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "l"(l2_policy)
      : "memory");
#endif
}

// Starts copying `bytes` contiguous bytes (a multiple of 16, both addresses 16-byte aligned) from
// global into shared memory, without a tensor map; the bytes count on the mbarrier as they land.
__device__ __forceinline__ void bulk_load(void* smem_dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;\n" ::"r"(smem_addr(smem_dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(l2_policy)
      : "memory");
#endif
}

// Starts storing the shared-memory box to the tensor at (c0, c1); parts of the box outside the
// tensor are not written. Completion is tracked per thread with bulk async-groups.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src, int c0, int c1,
                                             uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;\n" ::
                   "l"(map),
               "r"(smem_addr(smem_src)), "r"(c0), "r"(c1), "l"(l2_policy)
               : "memory");
#endif
}

// Like tma_store_2d, but adds the box element-wise onto the tensor (int32 adds wrap), atomically
// with respect to other reductions: the split-K combine.
__device__ __forceinline__ void tma_reduce_add_2d(const CUtensorMap* map, const void* smem_src, int c0, int c1,
                                                  uint64_t l2_policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.bulk_group.L2::cache_hint [%0, {%2, %3}], [%1], %4;\n" ::
          "l"(map),
      "r"(smem_addr(smem_src)), "r"(c0), "r"(c1), "l"(l2_policy)
      : "memory");
#endif
}

// Closes the bulk copies this thread issued since the last commit into one bulk async-group.
__device__ __forceinline__ void bulk_commit_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `Pending` of this thread's bulk groups still read their shared-memory source
// (the source may then be overwritten; the global writes may still be in flight).
template <int Pending>
__device__ __forceinline__ void bulk_wait_group_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Waits until at most `Pending` of this thread's bulk groups are incomplete.
template <int Pending>
__device__ __forceinline__ void bulk_wait_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma)
// reads of them; a barrier must still separate the writers from the thread that issues the copy.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Orders this thread's generic-proxy global-memory accesses with its async-proxy (TMA) accesses:
// writers of data that TMA will read, and the reader between acquiring their flag and the copy.
__device__ __forceinline__ void fence_proxy_async_global() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
#endif
}

// Pulls the descriptor into the TMA unit's cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
#endif
}

}  // namespace tcgemm::ptx

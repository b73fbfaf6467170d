// Thread block clusters (sm_90+): the block's rank in its cluster, the cluster-wide barrier and
// loads from another block's shared memory (distributed shared memory). Compiled to nothing, or
// rank 0, before sm_90, where no kernel is launched with a cluster.
#pragma once

#include <cstdint>

#include "ptx/smem.cuh"

namespace tcgemm::ptx {

// %cluster_ctarank: the block's rank in its cluster (0 without a cluster launch).
__device__ __forceinline__ uint32_t cluster_ctarank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t r;
  asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  return 0;
#endif
}

// barrier.cluster.arrive.release: this thread has arrived; its shared-memory writes before it are
// released to every block of the cluster.
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}

// barrier.cluster.wait.acquire: waits until every thread of every block of the cluster has
// arrived; their released writes are visible to this thread's loads after it.
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// barrier.cluster.arrive.relaxed: this thread has arrived, with no memory ordering (no wait for
// its earlier loads and copies to complete); pair with cluster_wait_acquire. What must be seen by
// the cluster after the wait is released otherwise (mbarrier_fence_init for initialized barriers).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}

// The cluster-wide barrier: arrive, then wait. Also a barrier of the block's own threads.
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive_release();
  cluster_wait_acquire();
}

// mapa.shared::cluster: the .shared::cluster address of the same variable as `p` (this block's
// shared memory) in the block of rank `rank`.
__device__ __forceinline__ uint32_t cluster_map_shared(const void* p, uint32_t rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t out;
  asm("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(out) : "r"(smem_addr(p)), "r"(rank));
  return out;
#else
  return smem_addr(p);
#endif
}

// ld.shared::cluster.b32 at a cluster_map_shared address (volatile: kept after the cluster
// barrier before it); the float overload reads the same 32 bits as a float.
__device__ __forceinline__ int32_t ld_shared_cluster(uint32_t addr, int32_t) {
  int32_t v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
#endif
  return v;
}
__device__ __forceinline__ float ld_shared_cluster(uint32_t addr, float) {
  return __int_as_float(ld_shared_cluster(addr, int32_t{}));
}

// st.async.shared::cluster.mbarrier::complete_tx::bytes.b32: 32 bits into another block's shared
// memory at a cluster_map_shared address, completing 4 transaction bytes on that block's mbarrier
// (also a cluster_map_shared address); the receiver waits on its barrier, the sender on nothing.
__device__ __forceinline__ void st_async_cluster(uint32_t addr, float v, uint32_t remote_bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(addr),
               "r"(__float_as_int(v)), "r"(remote_bar)
               : "memory");
#endif
}

}  // namespace tcgemm::ptx

// TMA (sm_90): bulk tensor copies between global and shared memory driven by a CUtensorMap that
// the host encoded (kernels/sm90/sm90_tensor_map.h) and passes as a __grid_constant__ parameter.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "ptx/smem.cuh"

namespace tcgemm::ptx {

// Starts loading the box at (c0 = innermost coordinate, c1) into shared memory; the copy adds
// its bytes to the mbarrier's transaction count when it lands. Elements outside the tensor
// arrive as zeros (and still count).
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::
          "r"(smem_addr(smem_dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
#endif
}

// Pulls the descriptor into the TMA unit's cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
#endif
}

}  // namespace tcgemm::ptx

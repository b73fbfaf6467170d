// One kernel launch, optionally as a programmatic dependent launch (PDL, sm_90+): with
// `overlap` the kernel may start before the previous kernel on the stream has finished, and must
// order itself with ptx/griddep.cuh (griddep_wait before it touches anything that kernel writes
// or reads). Used by the kernels of tcgemm.quant_linear's few-rows path.
// Also: the dynamic shared memory opt-in of a kernel, set once per device.
#pragma once

#include <array>
#include <atomic>

#include <cuda_runtime.h>

#include "common/cuda_check.h"

namespace tcgemm {

// cudaFuncSetAttribute(Kernel, MaxDynamicSharedMemorySize, Bytes) the first time Kernel is
// launched on the current device, not on every launch (a driver call of about a microsecond of
// host time per call). A race only repeats the call.
template <auto Kernel, int Bytes>
void allow_dynamic_smem() {
  static std::array<std::atomic<bool>, 64> done{};
  int device = 0;
  TCGEMM_CUDA_CHECK(cudaGetDevice(&device));
  if (device >= 0 && device < static_cast<int>(done.size()) && done[device].load(std::memory_order_acquire)) return;
  TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Bytes));
  if (device >= 0 && device < static_cast<int>(done.size())) done[device].store(true, std::memory_order_release);
}

// As launch_kernel, in clusters of `cluster` consecutive blocks along x (sm_90+; gridDim.x a
// multiple of it): the blocks of a cluster run at once and reach each other's shared memory
// (ptx/cluster.cuh). A cluster of 1 is a plain launch.
template <class... Params, class... Args>
void launch_kernel_in_clusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                               cudaStream_t stream, bool overlap, unsigned cluster, const Args&... args) {
  cudaLaunchAttribute attributes[2] = {};
  unsigned count = 0;
  if (overlap) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count++].val.clusterDim = {cluster, 1, 1};
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  TCGEMM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                   bool overlap, const Args&... args) {
  launch_kernel_in_clusters(kernel, grid, block, smem_bytes, stream, overlap, 1u, args...);
}

}  // namespace tcgemm

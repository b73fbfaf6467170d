// One kernel launch, optionally as a programmatic dependent launch (PDL, sm_90+): with
// `overlap` the kernel may start before the previous kernel on the stream has finished, and must
// order itself with ptx/griddep.cuh (griddep_wait before it touches anything that kernel writes
// or reads). Used by the kernels of tcgemm.quant_linear's few-rows path.
#pragma once

#include <cuda_runtime.h>

#include "common/cuda_check.h"

namespace tcgemm {

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                   bool overlap, const Args&... args) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = overlap ? 1 : 0;
  TCGEMM_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace tcgemm

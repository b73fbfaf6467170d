// Error checking for CUDA runtime calls and kernel launches below the binding layer.
// Failures throw std::runtime_error, which torch turns into a Python RuntimeError.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace tcgemm {

inline void cuda_check(cudaError_t status, const char* what, const char* file, int line) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("tcgemm: CUDA error '") + cudaGetErrorString(status) +
                             "' from " + what + " at " + file + ":" + std::to_string(line));
  }
}

}  // namespace tcgemm

#define TCGEMM_CUDA_CHECK(expr) ::tcgemm::cuda_check((expr), #expr, __FILE__, __LINE__)
// Call right after a <<<...>>> launch: catches bad configurations without synchronizing.
#define TCGEMM_CHECK_LAUNCH() ::tcgemm::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

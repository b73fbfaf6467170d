// sm90::kernel_available(): whether the current device runs this build's sm_90a kernels.
#include <array>
#include <atomic>

#include "common/cuda_check.h"
#include "kernels/sm90/sm90_gemm.h"

namespace tcgemm::sm90 {
namespace {

// Built with the same architecture flags as the kernels: which image the driver picks for it
// tells which one it picks for them.
__global__ void probe_kernel() {}

}  // namespace

bool kernel_available() {
#ifdef TCGEMM_NO_SM90A
  return false;  // built without sm_90a machine code (setup.py)
#else
  // Per device: 0 unknown, 1 no, 2 yes. A race only repeats the probe.
  static std::array<std::atomic<int>, 64> known{};
  int device = 0;
  TCGEMM_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= static_cast<int>(known.size())) return false;
  int state = known[device].load();
  if (state == 0) {
    int major = 0, minor = 0;
    TCGEMM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    TCGEMM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    bool ok = false;
    if (major == 9 && minor == 0) {
      // sm_90a machine code runs only on compute capability 9.0; the image the driver picked
      // must come from sm_90a PTX (a build without it would JIT the empty compute_80 body).
      cudaFuncAttributes attr{};
      const cudaError_t status =
          cudaFuncGetAttributes(&attr, probe_kernel);
      if (status == cudaSuccess) {
        ok = attr.ptxVersion >= 90 && attr.binaryVersion == 90;
      } else {
        (void)cudaGetLastError();  // "no kernel image": clear the error and report no
      }
    }
    state = ok ? 2 : 1;
    known[device].store(state);
  }
  return state == 2;
#endif
}

}  // namespace tcgemm::sm90

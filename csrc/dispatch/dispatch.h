// Backend selection and launch: (arch, forced backend) -> kernel family -> tile config.
// Torch-free: the binding layer describes the device and the problem with plain structs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gemm_params.h"

namespace tcgemm {

enum class Backend { kAuto, kCpu, kWmma, kWmmaSimple, kSm80, kSm90, kSkinny };

const char* backend_name(Backend b);
std::optional<Backend> parse_backend(std::string_view name);
std::string backend_choices();  // "auto, cpu, ..." for error messages

struct DeviceInfo {
  int major = 0, minor = 0;
  int sm_count = 0;
  int smem_optin = 0;  // largest dynamic shared memory a block may ask for, bytes
  bool sm90_kernels = false;  // this build's sm_90a kernels run on the device (sm90::kernel_available)
};

// Whether the sm90 kernels of this build run on the current CUDA device (fills DeviceInfo).
bool sm90_kernels_available();

// GPU backends this device can run, best first (what "auto" picks is the first).
std::vector<Backend> gpu_backends(const DeviceInfo& dev);

// Resolves kAuto and checks a forced GPU backend; returns an empty string when `out` is usable,
// else a sentence saying why not.
std::string resolve_gpu_backend(Backend requested, const DeviceInfo& dev, Backend* out);

// The operand layouts a backend reads directly ([rows, K] view); anything else the binding layer
// copies into a K-major buffer whose rows are padded to 16 bytes.
bool operand_fits(Backend b, const Operand& op, int64_t rows, int64_t k);

// Whether this backend adds 128 * (row sums of A) or 128 * (column sums of B) to fix up a
// flipped operand (mixed int8 x uint8 on WMMA); see kernels/wmma.
bool needs_row_offset(Backend b, const GemmParams& p);
bool needs_col_offset(Backend b, const GemmParams& p);

// Launches the GEMM on p.stream (p.k may be 0: D = epilogue(0)). The caller has validated
// shapes, layouts and offsets.
void run_gpu_gemm(Backend b, const GemmParams& p, const DeviceInfo& dev);

// The plain C++ path for rows [m_begin, m_end) of D; both operands K-major.
void run_cpu_gemm(const GemmParams& p, int64_t m_begin, int64_t m_end);

// The scaled GEMM (p.out_type, p.out, p.scaled): like resolve_gpu_backend, for the backends
// with a scaled epilogue (sm90, sm80) and this problem's scale granularity.
std::string resolve_scaled_gpu_backend(Backend requested, const DeviceInfo& dev, const GemmParams& p, Backend* out);
void run_gpu_scaled_gemm(Backend b, const GemmParams& p, const DeviceInfo& dev);
// The plain C++ path: rows [m_begin, m_end) of fp32 out (p.ldd between rows), both operands K-major.
void run_cpu_scaled_gemm(const GemmParams& p, float* out, int64_t m_begin, int64_t m_end);

}  // namespace tcgemm

#include "ops/tensor_args.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>
#include <optional>

#include "common/math.h"
#include "dispatch/launch.h"

namespace tcgemm {

bool fits_int32(int64_t v) {
  return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}

void check_operand(const char* op, const Tensor& t, const char* name, const char* shape, bool signed_only) {
  TCGEMM_CHECK_VALUE(t.dim() == 2, op, ": argument '", name, "' must be a 2-D tensor ", shape, ", got a ", num(t.dim()),
                     "-D tensor");
  if (signed_only) {
    TCGEMM_CHECK_TYPE(dtype_of(t) == ScalarType::Char, op, ": argument '", name, "' must have dtype torch.int8, got ",
                      dtype_name(dtype_of(t)));
  } else {
    TCGEMM_CHECK_TYPE(dtype_of(t) == ScalarType::Char || dtype_of(t) == ScalarType::Byte, op, ": argument '", name,
                      "' must have dtype torch.int8 or torch.uint8, got ", dtype_name(dtype_of(t)));
  }
  // Kernels index tiles and K slices in 32-bit arithmetic with headroom for rounding up.
  TCGEMM_CHECK_VALUE(t.size(0) < (int64_t{1} << 30) && t.size(1) < (int64_t{1} << 30), op, ": argument '", name,
                     "' has a dimension >= 2^30, which is not supported");
}

void check_same_device(const char* op, const Tensor& t, const char* name, const Tensor& ref, const char* ref_name) {
  TCGEMM_CHECK_VALUE(same_device(t, ref), op, ": argument '", name, "' must be on the same device as '", ref_name,
                     "' (", device_str(ref), "), got ", device_str(t));
}

Backend parse_backend_arg(const char* op, std::string_view name) {
  const std::optional<Backend> b = parse_backend(name);
  TCGEMM_CHECK_VALUE(b.has_value(), op, ": argument 'backend' must be one of ", backend_choices(), "; got '",
                     std::string(name), "'");
  return *b;
}

// A size-1 dimension's stride is arbitrary in torch, so it is set to whatever makes the layout
// recognisable to the kernels.
Operand describe(const Tensor& t, bool transpose) {
  const int64_t rows = t.size(transpose ? 1 : 0);
  const int64_t k = t.size(transpose ? 0 : 1);
  Operand op;
  op.ptr = t.data_ptr();
  op.stride_row = t.stride(transpose ? 1 : 0);
  op.stride_k = t.stride(transpose ? 0 : 1);
  op.is_signed = dtype_of(t) == ScalarType::Char;
  if (k == 1) op.stride_k = op.stride_row == 1 ? 16 : 1;
  if (rows == 1) op.stride_row = op.stride_k == 1 ? 16 : 1;
  return op;
}

GemmProblem gemm_problem(const Tensor& a, const Tensor& b, void* d, int64_t ldd, OutType type, bool b_rows) {
  return gemm_problem(describe(a, false), a.size(0), a.size(1), b, d, ldd, type, b_rows);
}

GemmProblem gemm_problem(const Operand& a, int64_t m, int64_t k, const Tensor& b, void* d, int64_t ldd, OutType type,
                         bool b_rows) {
  GemmProblem p;
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(b.size(b_rows ? 0 : 1));
  p.k = static_cast<int>(k);
  p.a = a;
  p.b = describe(b, !b_rows);
  p.d = Output{d, ldd, type};
  return p;
}

Tensor k_major_copy(const Tensor& t, bool transpose) {
  const Tensor view = transpose ? transposed(t) : t;
  const Tensor buf = empty({view.size(0), round_up<int64_t>(view.size(1), 16)}, dtype_of(t), t);
  Tensor rows_by_k = first_cols(buf, view.size(1));
  copy_into(rows_by_k, view);
  return rows_by_k;
}

namespace {

DeviceInfo read_device_info(int32_t index) {
  cudaDeviceProp prop;
  const cudaError_t status = cudaGetDeviceProperties(&prop, index);
  TCGEMM_CHECK_INTERNAL(status == cudaSuccess, "tcgemm: cudaGetDeviceProperties(", num(index),
                        ") failed: ", cudaGetErrorString(status));
  DeviceInfo dev;
  dev.major = prop.major;
  dev.minor = prop.minor;
  dev.sm_count = prop.multiProcessorCount;
  dev.smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  const CudaDeviceScope scope(index);
  dev.sm90_kernels = sm90_kernels_available();
  if (dev.sm90_kernels) dev.w4_resident = w4_residency();
  return dev;
}

}  // namespace

DeviceInfo device_info(int32_t i) {
  // What a device is does not change: read once per device (every GPU call asks, at decode too).
  constexpr int kDevices = 64;
  static std::array<std::once_flag, kDevices> once;
  static std::array<DeviceInfo, kDevices> known;
  if (i < 0 || i >= kDevices) return read_device_info(i);
  std::call_once(once[i], [&] { known[i] = read_device_info(i); });
  return known[i];
}

DeviceInfo device_info(const Tensor& t) { return device_info(t.get_device_index()); }

OperandCopies fit_operands(Backend backend, const Tensor& a, const Tensor& b, GemmProblem& p, bool b_rows) {
  OperandCopies copies;
  if (p.k == 0) return copies;  // no kernel reads them
  if (!operand_fits(backend, p.a, p.m, p.k)) {
    TCGEMM_CHECK_INTERNAL(a.dim() == 2, "tcgemm: an A operand described without its tensor needs a copy");
    copies.a = k_major_copy(a, false);
    p.a = describe(*copies.a, false);
  }
  if (!operand_fits(backend, p.b, p.n, p.k)) {
    copies.b = k_major_copy(b, !b_rows);
    p.b = describe(*copies.b, false);
  }
  return copies;
}

void check_cpu_backend(const char* op, Backend requested) {
  TCGEMM_CHECK_VALUE(requested == Backend::kAuto || requested == Backend::kCpu, op, ": backend '",
                     backend_name(requested), "' needs CUDA tensors, got tensors on cpu (argument 'backend')");
}

OperandCopies cpu_k_major_operands(const char* op, Backend requested, const Tensor& a, const Tensor& b, GemmProblem& p,
                                   bool b_rows) {
  check_cpu_backend(op, requested);
  OperandCopies k_major;
  if (!p.a.k_major()) {
    TCGEMM_CHECK_INTERNAL(a.dim() == 2, "tcgemm: an A operand described without its tensor needs a copy");
    k_major.a = as_contiguous(a);
    p.a = describe(*k_major.a, false);
  }
  if (!p.b.k_major()) {
    k_major.b = b_rows ? as_contiguous(b) : transposed(contiguous_clone(transposed(b)));
    p.b = describe(*k_major.b, !b_rows);
  }
  return k_major;
}

int64_t cpu_row_grain(const GemmProblem& p) {
  return std::max<int64_t>(1, (int64_t{1} << 21) / std::max<int64_t>(1, int64_t{p.n} * p.k));
}

}  // namespace tcgemm

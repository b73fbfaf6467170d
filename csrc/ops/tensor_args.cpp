#include "ops/tensor_args.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>
#include <optional>

#include "common/math.h"

namespace tcgemm {

std::string shape_str(at::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + num(sizes[i]);
  return s + "]";
}

std::string dtype_name(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

bool fits_int32(int64_t v) {
  return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
}

void check_operand(const char* op, const at::Tensor& t, const char* name, const char* shape, bool signed_only) {
  TORCH_CHECK_VALUE(t.dim() == 2, op, ": argument '", name, "' must be a 2-D tensor ", shape, ", got a ", num(t.dim()),
                    "-D tensor");
  if (signed_only) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kChar, op, ": argument '", name, "' must have dtype torch.int8, got ",
                     dtype_name(t.scalar_type()));
  } else {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kChar || t.scalar_type() == at::kByte, op, ": argument '", name,
                     "' must have dtype torch.int8 or torch.uint8, got ", dtype_name(t.scalar_type()));
  }
  // Kernels index tiles and K slices in 32-bit arithmetic with headroom for rounding up.
  TORCH_CHECK_VALUE(t.size(0) < (int64_t{1} << 30) && t.size(1) < (int64_t{1} << 30), op, ": argument '", name,
                    "' has a dimension >= 2^30, which is not supported");
}

void check_same_device(const char* op, const at::Tensor& t, const char* name, const at::Tensor& ref,
                       const char* ref_name) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": argument '", name, "' must be on the same device as '", ref_name,
                    "' (", ref.device().str(), "), got ", t.device().str());
}

Backend parse_backend_arg(const char* op, std::string_view name) {
  const std::optional<Backend> b = parse_backend(name);
  TORCH_CHECK_VALUE(b.has_value(), op, ": argument 'backend' must be one of ", backend_choices(), "; got '",
                    std::string(name), "'");
  return *b;
}

// A size-1 dimension's stride is arbitrary in torch, so it is set to whatever makes the layout
// recognisable to the kernels.
Operand describe(const at::Tensor& t, bool transpose) {
  const int64_t rows = t.size(transpose ? 1 : 0);
  const int64_t k = t.size(transpose ? 0 : 1);
  Operand op;
  op.ptr = t.data_ptr();
  op.stride_row = t.stride(transpose ? 1 : 0);
  op.stride_k = t.stride(transpose ? 0 : 1);
  op.is_signed = t.scalar_type() == at::kChar;
  if (k == 1) op.stride_k = op.stride_row == 1 ? 16 : 1;
  if (rows == 1) op.stride_row = op.stride_k == 1 ? 16 : 1;
  return op;
}

GemmProblem gemm_problem(const at::Tensor& a, const at::Tensor& b, void* d, int64_t ldd, OutType type,
                         bool b_rows) {
  return gemm_problem(describe(a, false), a.size(0), a.size(1), b, d, ldd, type, b_rows);
}

GemmProblem gemm_problem(const Operand& a, int64_t m, int64_t k, const at::Tensor& b, void* d, int64_t ldd,
                         OutType type, bool b_rows) {
  GemmProblem p;
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(b.size(b_rows ? 0 : 1));
  p.k = static_cast<int>(k);
  p.a = a;
  p.b = describe(b, !b_rows);
  p.d = Output{d, ldd, type};
  return p;
}

at::Tensor k_major_copy(const at::Tensor& t, bool transpose) {
  const at::Tensor view = transpose ? t.t() : t;
  at::Tensor buf = at::empty({view.size(0), round_up<int64_t>(view.size(1), 16)}, t.options());
  at::Tensor rows_by_k = buf.narrow(1, 0, view.size(1));
  rows_by_k.copy_(view);
  return rows_by_k;
}

namespace {

DeviceInfo read_device_info(const at::Device& device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  DeviceInfo dev;
  dev.major = prop->major;
  dev.minor = prop->minor;
  dev.sm_count = prop->multiProcessorCount;
  dev.smem_optin = static_cast<int>(prop->sharedMemPerBlockOptin);
  const c10::cuda::CUDAGuard guard(device);
  dev.sm90_kernels = sm90_kernels_available();
  return dev;
}

}  // namespace

DeviceInfo device_info(const at::Device& device) {
  // What a device is does not change: read once per device (every GPU call asks, at decode too).
  constexpr int kDevices = 64;
  static std::array<std::once_flag, kDevices> once;
  static std::array<DeviceInfo, kDevices> known;
  const int i = device.index();
  if (i < 0 || i >= kDevices) return read_device_info(device);
  std::call_once(once[i], [&] { known[i] = read_device_info(device); });
  return known[i];
}

OperandCopies fit_operands(Backend backend, const at::Tensor& a, const at::Tensor& b, GemmProblem& p,
                           bool b_rows) {
  OperandCopies copies;
  if (p.k == 0) return copies;  // no kernel reads them
  if (!operand_fits(backend, p.a, p.m, p.k)) {
    TORCH_INTERNAL_ASSERT(a.dim() == 2, "tcgemm: an A operand described without its tensor needs a copy");
    copies.a = k_major_copy(a, false);
    p.a = describe(copies.a, false);
  }
  if (!operand_fits(backend, p.b, p.n, p.k)) {
    copies.b = k_major_copy(b, !b_rows);
    p.b = describe(copies.b, false);
  }
  return copies;
}

void check_cpu_backend(const char* op, Backend requested) {
  TORCH_CHECK_VALUE(requested == Backend::kAuto || requested == Backend::kCpu, op, ": backend '",
                    backend_name(requested), "' needs CUDA tensors, got tensors on cpu (argument 'backend')");
}

OperandCopies cpu_k_major_operands(const char* op, Backend requested, const at::Tensor& a, const at::Tensor& b,
                                   GemmProblem& p, bool b_rows) {
  check_cpu_backend(op, requested);
  OperandCopies k_major;
  if (!p.a.k_major()) {
    TORCH_INTERNAL_ASSERT(a.dim() == 2, "tcgemm: an A operand described without its tensor needs a copy");
    k_major.a = a.contiguous();
    p.a = describe(k_major.a, false);
  }
  if (!p.b.k_major()) {
    k_major.b = b_rows ? b.contiguous() : b.t().contiguous().t();
    p.b = describe(k_major.b, !b_rows);
  }
  return k_major;
}

int64_t cpu_row_grain(const GemmProblem& p) {
  return std::max<int64_t>(1, (int64_t{1} << 21) / std::max<int64_t>(1, int64_t{p.n} * p.k));
}

}  // namespace tcgemm

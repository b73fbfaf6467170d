// tcgemm::gemm and tcgemm::gemm_out: validation, layout preparation, output allocation, launch.
// This is the only layer that sees torch (ops/torch_api.h); below it everything is a GemmProblem
// and its epilogue.
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "common/math.h"
#include "dispatch/backends.h"
#include "dispatch/launch.h"
#include "ops/cpu_parallel.h"
#include "ops/ops.h"
#include "ops/tensor_args.h"
#include "ops/torch_api.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.gemm";

void check_int32_mn(const Tensor& t, const char* name, int64_t m, int64_t n) {
  TCGEMM_CHECK_TYPE(dtype_of(t) == ScalarType::Int, kOp, ": argument '", name, "' must have dtype torch.int32, got ",
                    dtype_name(dtype_of(t)));
  TCGEMM_CHECK_VALUE(t.dim() == 2 && t.size(0) == m && t.size(1) == n, kOp, ": argument '", name,
                     "' must have shape [M, N] = [", num(m), ", ", num(n), "], got ", shape_str(t));
}

void run_cuda(Backend requested, const Tensor& a, const Tensor& b, GemmProblem& p, Int32EpilogueParams& e) {
  const CudaDeviceScope scope(a.get_device_index());
  const DeviceInfo dev = device_info(a);
  Backend backend = Backend::kAuto;
  const std::string why_not = resolve_gpu_backend(requested, dev, e, &backend);
  TCGEMM_CHECK_VALUE(why_not.empty(), kOp, ": ", why_not, " (argument 'backend')");

  // Operands the backend cannot read in place get a K-major copy; the copies stay alive (and
  // the caching allocator keeps their memory) until the launch below is enqueued on this stream.
  // With K = 0 no kernel reads them.
  const OperandCopies copies = fit_operands(backend, a, b, p);
  std::optional<Tensor> row_offset, col_offset;
  if (needs_row_offset(backend, p)) {
    row_offset = sum_times_128_int32(a, 1);
    e.row_offset = const_data<int32_t>(*row_offset);
  }
  if (needs_col_offset(backend, p)) {
    col_offset = sum_times_128_int32(b, 0);
    e.col_offset = const_data<int32_t>(*col_offset);
  }
  p.stream = current_cuda_stream(a.get_device_index());
  run_gpu(backend, p, e, dev);
}

void run_on_cpu(Backend requested, const Tensor& a, const Tensor& b, GemmProblem& p, const Int32EpilogueParams& e) {
  const OperandCopies k_major = cpu_k_major_operands(kOp, requested, a, b, p);
  cpu_parallel_for(p.m, cpu_row_grain(p), [&](int64_t begin, int64_t end) { run_cpu(p, e, begin, end); });
}

}  // namespace

void gemm_out(const Tensor& a, const Tensor& b, const std::optional<Tensor>& c, int64_t alpha, int64_t beta,
              std::string_view backend_arg, const Tensor& out) {
  const Backend requested = parse_backend_arg(kOp, backend_arg);
  check_operand(kOp, a, "a", "[M, K]");
  check_operand(kOp, b, "b", "[K, N]");
  check_same_device(kOp, b, "b", a);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TCGEMM_CHECK_VALUE(b.size(0) == k, kOp, ": K mismatch: 'a' is [M, K] = ", shape_str(a),
                     " but 'b' is [K, N] = ", shape_str(b));
  TCGEMM_CHECK_VALUE(fits_int32(alpha), kOp, ": argument 'alpha' must fit in int32, got ", num(alpha));
  TCGEMM_CHECK_VALUE(fits_int32(beta), kOp, ": argument 'beta' must fit in int32, got ", num(beta));
  const bool use_c = beta != 0;
  TCGEMM_CHECK_VALUE(!use_c || c.has_value(), kOp, ": argument 'beta' is ", num(beta), " but no 'c' was given");
  if (c.has_value()) {
    check_int32_mn(*c, "c", m, n);
    check_same_device(kOp, *c, "c", a);
  }
  check_int32_mn(out, "out", m, n);
  check_same_device(kOp, out, "out", a);
  TCGEMM_CHECK_VALUE(internal_overlap(out) != Overlap::kYes, kOp,
                     ": argument 'out' has elements that share memory (an expand()-ed view?); every element "
                     "must be writable on its own");
  TCGEMM_CHECK_VALUE(!is_alias_of(out, a), kOp, ": argument 'out' must not share memory with 'a'");
  TCGEMM_CHECK_VALUE(!is_alias_of(out, b), kOp, ": argument 'out' must not share memory with 'b'");
  if (m == 0 || n == 0) return;

  // Kernels write D with unit stride along N, each element after reading the C element at the
  // same place, so `out` may be `c` itself. Any other layout of `out`, or other memory shared
  // between `out` and `c`, goes through a fresh result buffer and a copy.
  const bool c_is_out =
      use_c && c->data_ptr() == out.data_ptr() && c->stride(0) == out.stride(0) && c->stride(1) == out.stride(1);
  const bool c_shares_out = use_c && is_alias_of(*c, out) && !c_is_out;
  const bool direct = (out.stride(1) == 1 || n == 1) && !c_shares_out && internal_overlap(out) == Overlap::kNo;
  std::optional<Tensor> fresh;
  if (!direct) fresh = empty({m, n}, ScalarType::Int, out);
  const Tensor& d = direct ? out : *fresh;

  GemmProblem p = gemm_problem(a, b, data<int32_t>(d), d.stride(0), OutType::kInt32);
  Int32EpilogueParams e;
  e.alpha = static_cast<int32_t>(alpha);
  e.beta = static_cast<int32_t>(beta);
  if (use_c) {
    e.c = const_data<int32_t>(*c);
    e.c_stride_m = c->stride(0);
    e.c_stride_n = c->stride(1);
  }

  if (is_cuda(a)) {
    run_cuda(requested, a, b, p, e);
  } else {
    TCGEMM_CHECK_VALUE(is_cpu(a), kOp, ": argument 'a' must be a CPU or CUDA tensor, got ", device_str(a));
    run_on_cpu(requested, a, b, p, e);
  }
  if (!direct) copy_into(out, d);
}

Tensor gemm(const Tensor& a, const Tensor& b, const std::optional<Tensor>& c, int64_t alpha, int64_t beta,
            std::string_view backend) {
  check_operand(kOp, a, "a", "[M, K]");
  check_operand(kOp, b, "b", "[K, N]");
  Tensor out = empty({a.size(0), b.size(1)}, ScalarType::Int, a);
  gemm_out(a, b, c, alpha, beta, backend, out);
  return out;
}

namespace {

// The registered kernels, in the types the stable ABI unboxes to.
Tensor gemm_kernel(const Tensor& a, const Tensor& b, const std::optional<Tensor>& c, int64_t alpha, int64_t beta,
                   const std::string& backend) {
  return gemm(a, b, c, alpha, beta, backend);
}

void gemm_out_kernel(const Tensor& a, const Tensor& b, const std::optional<Tensor>& c, int64_t alpha, int64_t beta,
                     const std::string& backend, Tensor out) {
  gemm_out(a, b, c, alpha, beta, backend, out);
}

void register_kernels(Library& m) {
  m.impl("gemm", TCGEMM_BOX(gemm_kernel));
  m.impl("gemm_out", TCGEMM_BOX(gemm_out_kernel));
}

}  // namespace

TCGEMM_IMPL_CPU_AND_CUDA(register_kernels)

}  // namespace tcgemm

// tcgemm::gemm and tcgemm::gemm_out: validation, layout preparation, output allocation, launch.
// This is the only layer that sees torch; below it everything is a GemmProblem and its epilogue.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "common/math.h"
#include "dispatch/backends.h"
#include "dispatch/launch.h"
#include "ops/cpu_parallel.h"
#include "ops/tensor_args.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.gemm";

void check_int32_mn(const at::Tensor& t, const char* name, int64_t m, int64_t n) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, kOp, ": argument '", name, "' must have dtype torch.int32, got ",
                   dtype_name(t.scalar_type()));
  TORCH_CHECK_VALUE(t.dim() == 2 && t.size(0) == m && t.size(1) == n, kOp, ": argument '", name,
                    "' must have shape [M, N] = [", num(m), ", ", num(n), "], got ", shape_str(t.sizes()));
}

void run_cuda(Backend requested, const at::Tensor& a, const at::Tensor& b, GemmProblem& p, Int32EpilogueParams& e) {
  const c10::cuda::CUDAGuard guard(a.device());
  const DeviceInfo dev = device_info(a.device());
  Backend backend = Backend::kAuto;
  const std::string why_not = resolve_gpu_backend(requested, dev, e, &backend);
  TORCH_CHECK_VALUE(why_not.empty(), kOp, ": ", why_not, " (argument 'backend')");

  // Operands the backend cannot read in place get a K-major copy; the copies stay alive (and
  // the caching allocator keeps their memory) until the launch below is enqueued on this stream.
  // With K = 0 no kernel reads them.
  const OperandCopies copies = fit_operands(backend, a, b, p);
  at::Tensor row_offset, col_offset;
  if (needs_row_offset(backend, p)) {
    row_offset = a.sum(1, false, at::kLong).mul_(128).to(at::kInt);
    e.row_offset = row_offset.data_ptr<int32_t>();
  }
  if (needs_col_offset(backend, p)) {
    col_offset = b.sum(0, false, at::kLong).mul_(128).to(at::kInt);
    e.col_offset = col_offset.data_ptr<int32_t>();
  }
  p.stream = at::cuda::getCurrentCUDAStream(a.device().index()).stream();
  run_gpu(backend, p, e, dev);
}

void run_on_cpu(Backend requested, const at::Tensor& a, const at::Tensor& b, GemmProblem& p,
                const Int32EpilogueParams& e) {
  const OperandCopies k_major = cpu_k_major_operands(kOp, requested, a, b, p);
  cpu_parallel_for(p.m, cpu_row_grain(p), [&](int64_t begin, int64_t end) { run_cpu(p, e, begin, end); });
}

}  // namespace

void gemm_out(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& c, int64_t alpha,
              int64_t beta, std::string_view backend_arg, at::Tensor& out) {
  const Backend requested = parse_backend_arg(kOp, backend_arg);
  check_operand(kOp, a, "a", "[M, K]");
  check_operand(kOp, b, "b", "[K, N]");
  check_same_device(kOp, b, "b", a);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK_VALUE(b.size(0) == k, kOp, ": K mismatch: 'a' is [M, K] = ", shape_str(a.sizes()),
                    " but 'b' is [K, N] = ", shape_str(b.sizes()));
  TORCH_CHECK_VALUE(fits_int32(alpha), kOp, ": argument 'alpha' must fit in int32, got ", num(alpha));
  TORCH_CHECK_VALUE(fits_int32(beta), kOp, ": argument 'beta' must fit in int32, got ", num(beta));
  const bool use_c = beta != 0;
  TORCH_CHECK_VALUE(!use_c || c.has_value(), kOp, ": argument 'beta' is ", num(beta), " but no 'c' was given");
  if (c.has_value()) {
    check_int32_mn(*c, "c", m, n);
    check_same_device(kOp, *c, "c", a);
  }
  check_int32_mn(out, "out", m, n);
  check_same_device(kOp, out, "out", a);
  TORCH_CHECK_VALUE(at::has_internal_overlap(out) != at::MemOverlap::Yes, kOp,
                    ": argument 'out' has elements that share memory (an expand()-ed view?); every element "
                    "must be writable on its own");
  TORCH_CHECK_VALUE(!out.is_alias_of(a), kOp, ": argument 'out' must not share memory with 'a'");
  TORCH_CHECK_VALUE(!out.is_alias_of(b), kOp, ": argument 'out' must not share memory with 'b'");
  if (m == 0 || n == 0) return;

  // Kernels write D with unit stride along N, each element after reading the C element at the
  // same place, so `out` may be `c` itself. Any other layout of `out`, or other memory shared
  // between `out` and `c`, goes through a fresh result buffer and a copy.
  const bool c_is_out = use_c && c->data_ptr() == out.data_ptr() && c->strides() == out.strides();
  const bool c_shares_out = use_c && c->is_alias_of(out) && !c_is_out;
  const bool direct = (out.stride(1) == 1 || n == 1) && !c_shares_out &&
                      at::has_internal_overlap(out) == at::MemOverlap::No;
  at::Tensor d = direct ? out : at::empty({m, n}, out.options());

  GemmProblem p = gemm_problem(a, b, d.data_ptr<int32_t>(), d.stride(0), OutType::kInt32);
  Int32EpilogueParams e;
  e.alpha = static_cast<int32_t>(alpha);
  e.beta = static_cast<int32_t>(beta);
  if (use_c) {
    e.c = c->data_ptr<int32_t>();
    e.c_stride_m = c->stride(0);
    e.c_stride_n = c->stride(1);
  }

  if (a.is_cuda()) {
    run_cuda(requested, a, b, p, e);
  } else {
    TORCH_CHECK_VALUE(a.is_cpu(), kOp, ": argument 'a' must be a CPU or CUDA tensor, got ", a.device().str());
    run_on_cpu(requested, a, b, p, e);
  }
  if (!direct) out.copy_(d);
}

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& c, int64_t alpha,
                int64_t beta, std::string_view backend) {
  check_operand(kOp, a, "a", "[M, K]");
  check_operand(kOp, b, "b", "[K, N]");
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(at::kInt));
  gemm_out(a, b, c, alpha, beta, backend, out);
  return out;
}

TORCH_LIBRARY_IMPL(tcgemm, CPU, m) {
  m.impl("gemm", &gemm);
  m.impl("gemm_out", &gemm_out);
}

TORCH_LIBRARY_IMPL(tcgemm, CUDA, m) {
  m.impl("gemm", &gemm);
  m.impl("gemm_out", &gemm_out);
}

}  // namespace tcgemm

// tcgemm::scaled_gemm: int8 x int8 -> bf16 / fp16 / fp32 with the scales, bias and conversion
// fused into the GEMM's epilogue (per-block scales: into its main loop). Validation, the scale
// granularity read off the scale shapes, output allocation, launch.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/math.h"
#include "dispatch/dispatch.h"
#include "ops/op_utils.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.scaled_gemm";
constexpr int64_t kScaleBlock = 128;      // K (and weight N) extent of one per-block scale
constexpr int64_t kMaxUnblockedK = 131071;  // int8 x int8 dot products of this length fit in int32

void check_scale_tensor(const at::Tensor& s, const char* name, const at::Tensor& a) {
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, kOp, ": argument '", name, "' must have dtype torch.float32, got ",
                   dtype_name(s.scalar_type()));
  check_same_device(kOp, s, name, a);
}

// scale_a: [] / [1] / [1, 1] per-tensor, [M, 1] per-token, [M, KB] per-block (1x128).
void describe_scale_a(const at::Tensor& s, int64_t m, int64_t kb, ScaledEpilogueParams& out) {
  out.scale_a = s.data_ptr<float>();
  if (s.numel() == 1 && s.dim() <= 2) return;  // strides stay zero: one value for all
  if (s.dim() == 2 && s.size(0) == m && (s.size(1) == 1 || s.size(1) == kb)) {
    out.sa_stride_m = m > 1 ? s.stride(0) : 0;
    out.sa_stride_kb = s.size(1) > 1 ? s.stride(1) : 0;
    return;
  }
  TORCH_CHECK_VALUE(false, kOp, ": argument 'scale_a' must have shape [] or [1] (per-tensor), [M, 1] = [", num(m),
                    ", 1] (per-token) or [M, ceil(K/128)] = [", num(m), ", ", num(kb), "] (per-block 1x128), got ",
                    shape_str(s.sizes()));
}

// scale_b: [] / [1] per-tensor, [N] or [1, N] per-channel, [NB, KB] per-block 128x128,
// [N, KB] per-channel 1x128 blocks; ambiguous shapes resolve in that order.
void describe_scale_b(const at::Tensor& s, int64_t n, int64_t kb, ScaledEpilogueParams& out) {
  out.scale_b = s.data_ptr<float>();
  const int64_t nb = ceil_div(n, kScaleBlock);
  if (s.numel() == 1 && s.dim() <= 2) return;
  if (s.dim() == 1 && s.size(0) == n) {
    out.sb_stride_n = s.stride(0);
    return;
  }
  if (s.dim() == 2 && s.size(0) == 1 && s.size(1) == n) {
    out.sb_stride_n = s.stride(1);
    return;
  }
  if (s.dim() == 2 && s.size(1) == kb && (s.size(0) == nb || s.size(0) == n)) {
    out.sb_n_shift = s.size(0) == nb ? 7 : 0;
    out.sb_stride_n = s.size(0) > 1 ? s.stride(0) : 0;
    out.sb_stride_kb = kb > 1 ? s.stride(1) : 0;
    return;
  }
  TORCH_CHECK_VALUE(false, kOp, ": argument 'scale_b' must have shape [] or [1] (per-tensor), [N] = [", num(n),
                    "] or [1, N] (per-channel), [ceil(N/128), ceil(K/128)] = [", num(nb), ", ", num(kb),
                    "] (per-block 128x128) or [N, ceil(K/128)] = [", num(n), ", ", num(kb), "], got ",
                    shape_str(s.sizes()));
}

at::ScalarType check_out_dtype(const std::optional<at::ScalarType>& out_dtype) {
  const at::ScalarType t = out_dtype.value_or(at::kBFloat16);
  TORCH_CHECK_TYPE(t == at::kBFloat16 || t == at::kHalf || t == at::kFloat, kOp,
                   ": argument 'out_dtype' must be torch.bfloat16, torch.float16 or torch.float32, got ",
                   dtype_name(t));
  return t;
}

OutType out_type_of(at::ScalarType t) {
  if (t == at::kBFloat16) return OutType::kBf16;
  if (t == at::kHalf) return OutType::kFp16;
  return OutType::kFp32;
}

void run_cuda(Backend requested, const at::Tensor& a, const at::Tensor& b, GemmParams& p) {
  const c10::cuda::CUDAGuard guard(a.device());
  const DeviceInfo dev = device_info(a.device());
  Backend backend = Backend::kAuto;
  const std::string why_not = resolve_scaled_gpu_backend(requested, dev, p, &backend);
  TORCH_CHECK_VALUE(why_not.empty(), kOp, ": ", why_not, " (argument 'backend')");
  const OperandCopies copies = fit_operands(backend, a, b, p);  // alive until the launch is enqueued
  p.stream = at::cuda::getCurrentCUDAStream(a.device().index()).stream();
  run_gpu_scaled_gemm(backend, p, dev);
}

void run_cpu(Backend requested, const at::Tensor& a, const at::Tensor& b, GemmParams& p, at::Tensor& out) {
  const OperandCopies k_major = cpu_k_major_operands(kOp, requested, a, b, p);
  // fp32 results, rounded once to the output dtype by torch (round to nearest even).
  at::Tensor f32 = out.scalar_type() == at::kFloat ? out : at::empty(out.sizes(), out.options().dtype(at::kFloat));
  float* dst = f32.data_ptr<float>();
  at::parallel_for(0, p.m, cpu_row_grain(p), [&](int64_t begin, int64_t end) { run_cpu_scaled_gemm(p, dst, begin, end); });
  if (!f32.is_same(out)) out.copy_(f32);
}

}  // namespace

at::Tensor scaled_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                       const std::optional<at::Tensor>& bias, std::optional<at::ScalarType> out_dtype,
                       std::string_view backend_arg) {
  const Backend requested = parse_backend_arg(kOp, backend_arg);
  check_operand(kOp, a, "a", "[M, K]", /*signed_only=*/true);
  check_operand(kOp, b, "b", "[K, N]", /*signed_only=*/true);
  check_same_device(kOp, b, "b", a);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK_VALUE(b.size(0) == k, kOp, ": K mismatch: 'a' is [M, K] = ", shape_str(a.sizes()),
                    " but 'b' is [K, N] = ", shape_str(b.sizes()));
  const at::ScalarType dtype = check_out_dtype(out_dtype);
  check_scale_tensor(scale_a, "scale_a", a);
  check_scale_tensor(scale_b, "scale_b", a);
  const int64_t kb = std::max<int64_t>(1, ceil_div(k, kScaleBlock));
  GemmParams p;
  describe_scale_a(scale_a, m, kb, p.scaled);
  describe_scale_b(scale_b, n, kb, p.scaled);
  at::Tensor bias_f32;
  if (bias.has_value()) {
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == n, kOp, ": argument 'bias' must have shape [N] = [", num(n),
                      "], got ", shape_str(bias->sizes()));
    TORCH_CHECK_TYPE(at::isFloatingType(bias->scalar_type()), kOp,
                     ": argument 'bias' must have a floating-point dtype, got ", dtype_name(bias->scalar_type()));
    check_same_device(kOp, *bias, "bias", a);
    bias_f32 = bias->to(at::kFloat).contiguous();
    p.scaled.bias = bias_f32.data_ptr<float>();
  }
  TORCH_CHECK_VALUE(p.scaled.per_block() || k <= kMaxUnblockedK, kOp, ": K = ", num(k), " > ", num(kMaxUnblockedK),
                    " could overflow the int32 accumulator without per-block scales; pass scale_a as [M, ceil(K/128)]"
                    " (per-block 1x128)");

  at::Tensor out = at::empty({m, n}, a.options().dtype(dtype));
  if (m == 0 || n == 0) return out;
  if (k == 0) {  // every sum is zero: out = bias
    if (bias_f32.defined()) {
      out.copy_(bias_f32.unsqueeze(0).expand({m, n}));
    } else {
      out.zero_();
    }
    return out;
  }
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(k);
  p.a = describe(a, false);
  p.b = describe(b, true);
  p.out_type = out_type_of(dtype);
  p.out = out.data_ptr();
  p.ldd = n;
  if (a.is_cuda()) {
    run_cuda(requested, a, b, p);
  } else {
    TORCH_CHECK_VALUE(a.is_cpu(), kOp, ": argument 'a' must be a CPU or CUDA tensor, got ", a.device().str());
    run_cpu(requested, a, b, p, out);
  }
  return out;
}

TORCH_LIBRARY_FRAGMENT(tcgemm, m) {
  m.def(
      "scaled_gemm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "ScalarType? out_dtype=None, str backend='auto') -> Tensor");
}

TORCH_LIBRARY_IMPL(tcgemm, CPU, m) { m.impl("scaled_gemm", &scaled_gemm); }
TORCH_LIBRARY_IMPL(tcgemm, CUDA, m) { m.impl("scaled_gemm", &scaled_gemm); }

}  // namespace tcgemm

// tcgemm::scaled_gemm: int8 x int8 -> bf16 / fp16 / fp32 with the scales, bias and conversion
// fused into the GEMM's epilogue (per-block scales: into its main loop). Validation, the scale
// granularity read off the scale shapes, output allocation, launch.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/math.h"
#include "common/scale_layout.h"
#include "dispatch/backends.h"
#include "dispatch/launch.h"
#include "epilogue/scaled_epilogue.h"
#include "kernels/skinny/skinny_gemm.h"
#include "ops/cpu_parallel.h"
#include "ops/ops.h"
#include "ops/tensor_args.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.scaled_gemm";

void check_scale_tensor(const at::Tensor& s, const char* name, const at::Tensor& a) {
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, kOp, ": argument '", name, "' must have dtype torch.float32, got ",
                   dtype_name(s.scalar_type()));
  check_same_device(kOp, s, name, a);
}

// The shapes common/scale_layout.h decodes; the messages list them.
ScaleOperand describe_scale_a(const at::Tensor& s, int64_t m, int64_t kb) {
  const std::optional<ScaleOperand> op = s.dim() <= 2 ? decode_scale_a(scale_tensor(s), m, kb) : std::nullopt;
  TORCH_CHECK_VALUE(op.has_value(), kOp, ": argument 'scale_a' must have shape ", scale_a_shapes(m, kb), ", got ",
                    shape_str(s.sizes()));
  return *op;
}

ScaleOperand describe_scale_b(const at::Tensor& s, int64_t n, int64_t kb) {
  const std::optional<ScaleOperand> op = s.dim() <= 2 ? decode_scale_b(scale_tensor(s), n, kb) : std::nullopt;
  TORCH_CHECK_VALUE(op.has_value(), kOp, ": argument 'scale_b' must have shape ", scale_b_shapes(n, kb), ", got ",
                    shape_str(s.sizes()));
  return *op;
}

// The int32 zero points `name` of the M rows of A: one element (per tensor) or [M, 1].
ZeroPointOperand checked_zero_point(const char* op, const at::Tensor& z, const char* name, int64_t m,
                                    const at::Tensor& ref, const char* ref_name) {
  TORCH_CHECK_TYPE(z.scalar_type() == at::kInt, op, ": argument '", name, "' must have dtype torch.int32, got ",
                   dtype_name(z.scalar_type()));
  check_same_device(op, z, name, ref, ref_name);
  const bool per_tensor = z.numel() == 1 && z.dim() <= 2;
  TORCH_CHECK_VALUE(per_tensor || (z.dim() == 2 && z.size(0) == m && z.size(1) == 1), op, ": argument '", name,
                    "' must have shape [] or [1] (per-tensor) or [M, 1] = [", num(m), ", 1] (per-token), got ",
                    shape_str(z.sizes()));
  ZeroPointOperand zp;
  zp.ptr = z.const_data_ptr<int32_t>();
  zp.stride_row = per_tensor || m == 1 ? 0 : z.stride(0);
  return zp;
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

// A packed 4-bit B (p.b_int4) replaced in p by its unpacked int8 weight, which is returned (it
// must outlive the launch).
at::Tensor unpack_b(GemmProblem& p, const at::Tensor& b, const ScaledGemmCall& call) {
  const at::Tensor w = unpack_int4_to_int8(b, call.b_group_scale, p.k);
  p.b = describe(w, false);
  p.b_int4 = false;
  p.b_group_scale = nullptr;
  return w;
}

void run_cuda(const char* op, Backend requested, const at::Tensor& a, const at::Tensor& b, GemmProblem& p,
              const ScaledEpilogueParams& e, const ScaledGemmCall& call) {
  const c10::cuda::CUDAGuard guard(a.device());
  const DeviceInfo dev = device_info(a.device());
  if (call.quantize_a != nullptr) {  // gemm_quantizes_a chose the skinny kernel, which reads B in place
    p.stream = at::cuda::getCurrentCUDAStream(a.device().index()).stream();
    p.pdl = call.overlap && has_pdl(dev);
    run_skinny_quantizing(p, e, *call.quantize_a, dev);
    return;
  }
  Backend backend = Backend::kAuto;
  const std::string why_not = resolve_gpu_backend(requested, dev, e, &backend);
  TORCH_CHECK_VALUE(why_not.empty(), op, ": ", why_not, " (argument 'backend')");
  const bool native_int4 = p.b_int4 && reads_packed_b(backend, p, dev, e.per_block());
  const at::Tensor unpacked = p.b_int4 && !native_int4 ? unpack_b(p, b, call) : at::Tensor();
  // alive until the launch is enqueued; a packed B read as it is stays out of it
  const OperandCopies copies =
      native_int4 ? OperandCopies{} : fit_operands(backend, a, unpacked.defined() ? unpacked : b, p, call.b_rows);
  p.stream = at::cuda::getCurrentCUDAStream(a.device().index()).stream();
  // An operand copy (or the unpacking) is a kernel between the quantize and the GEMM that writes
  // what the GEMM reads before its griddep_wait: no overlap then.
  p.pdl = call.overlap && has_pdl(dev) && !copies.a.defined() && !copies.b.defined() && !unpacked.defined();
  run_gpu(backend, p, e, dev);
}

void run_on_cpu(const char* op, Backend requested, const at::Tensor& a, const at::Tensor& b, GemmProblem& p,
                const ScaledEpilogueParams& e, at::Tensor& out, const ScaledGemmCall& call) {
  const at::Tensor unpacked = p.b_int4 ? unpack_b(p, b, call) : at::Tensor();
  const OperandCopies k_major =
      cpu_k_major_operands(op, requested, a, unpacked.defined() ? unpacked : b, p, call.b_rows);
  // fp32 results, rounded once to the output dtype by torch (round to nearest even).
  at::Tensor f32 = out.scalar_type() == at::kFloat ? out : at::empty(out.sizes(), out.options().dtype(at::kFloat));
  p.d = Output{f32.data_ptr<float>(), p.n, OutType::kFp32};
  cpu_parallel_for(p.m, cpu_row_grain(p), [&](int64_t begin, int64_t end) { run_cpu(p, e, begin, end); });
  if (!f32.is_same(out)) out.copy_(f32);
}

}  // namespace

ScaleTensor scale_tensor(const at::Tensor& s) {
  ScaleTensor t;
  t.ptr = s.data_ptr<float>();
  t.dim = static_cast<int>(s.dim());
  for (int i = 0; i < t.dim && i < 2; ++i) {
    t.sizes[i] = s.size(i);
    t.strides[i] = s.stride(i);
  }
  return t;
}

at::Tensor checked_colsum(const char* op, const std::optional<at::Tensor>& colsum, const char* name, int64_t n,
                          const at::Tensor& ref, const char* ref_name) {
  if (!colsum.has_value()) return at::Tensor();
  TORCH_CHECK_TYPE(colsum->scalar_type() == at::kInt, op, ": argument '", name, "' must have dtype torch.int32, got ",
                   dtype_name(colsum->scalar_type()));
  check_same_device(op, *colsum, name, ref, ref_name);
  TORCH_CHECK_VALUE(colsum->dim() == 1 && colsum->size(0) == n, op, ": argument '", name, "' must have shape [N] = [",
                    num(n), "], got ", shape_str(colsum->sizes()));
  return colsum->contiguous();
}

void check_asymmetric_k(const char* op, int64_t k, const char* zero_name) {
  TORCH_CHECK_VALUE(k <= kMaxAsymmetricK, op, ": K = ", num(k), " > ", num(kMaxAsymmetricK),
                    " could overflow the int32 sums with zero points (argument '", zero_name, "')");
}

at::Tensor checked_bias_f32(const char* op, const std::optional<at::Tensor>& bias, int64_t n, const at::Tensor& ref,
                            const char* ref_name) {
  if (!bias.has_value()) return at::Tensor();
  TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == n, op, ": argument 'bias' must have shape [N] = [", num(n),
                    "], got ", shape_str(bias->sizes()));
  TORCH_CHECK_TYPE(at::isFloatingType(bias->scalar_type()), op,
                   ": argument 'bias' must have a floating-point dtype, got ", dtype_name(bias->scalar_type()));
  check_same_device(op, *bias, "bias", ref, ref_name);
  return bias->to(at::kFloat).contiguous();
}

at::Tensor scaled_gemm_impl(const char* op, Backend requested, const at::Tensor& a, const at::Tensor& b,
                            ScaledEpilogueParams e, const at::Tensor& bias_f32, at::ScalarType out_dtype,
                            const ScaledGemmCall& call) {
  // A quantized in the kernel is never read as int8: an empty K-major description stands for it.
  Operand in_kernel;
  in_kernel.stride_k = 1;
  const Operand* a_rows = call.quantize_a != nullptr ? &in_kernel : call.a_rows;
  const bool described = a_rows != nullptr;
  const int64_t m = described ? call.m : a.size(0), k = described ? call.k : a.size(1);
  const int64_t n = b.size(call.b_rows ? 0 : 1);
  e.bias = bias_f32.defined() ? bias_f32.const_data_ptr<float>() : nullptr;
  e.b_colsum = call.colsum_i32.defined() ? call.colsum_i32.const_data_ptr<int32_t>() : nullptr;
  // Contiguous in the caller's shape: its M rows of N are the kernels' [M, N] with row stride N.
  at::Tensor out = call.out_shape.empty() ? at::empty({m, n}, a.options().dtype(out_dtype))
                                          : at::empty(call.out_shape, a.options().dtype(out_dtype));
  if (m == 0 || n == 0) return out;
  if (k == 0) {  // every sum is zero: out = bias
    if (bias_f32.defined()) {
      out.copy_(bias_f32.expand(out.sizes()));
    } else {
      out.zero_();
    }
    return out;
  }
  GemmProblem p = described ? gemm_problem(*a_rows, m, k, b, out.data_ptr(), n, out_type_of(out_dtype), call.b_rows)
                            : gemm_problem(a, b, out.data_ptr(), n, out_type_of(out_dtype), call.b_rows);
  const at::Tensor group_scale = call.b_group_scale != nullptr ? call.b_group_scale->contiguous() : at::Tensor();
  if (call.b_int4) {
    p.b_int4 = true;
    p.b.is_signed = true;  // the 4-bit values are two's complement (the bytes are uint8)
    p.b_group_scale = group_scale.defined() ? group_scale.const_data_ptr<int8_t>() : nullptr;
    p.b_group_scale_stride = group_scale.defined() ? group_scale.size(1) : 0;
  }
  if (a.is_cuda()) {
    run_cuda(op, requested, a, b, p, e, call);
  } else {
    TORCH_CHECK_VALUE(a.is_cpu(), op, ": argument 'a' must be a CPU or CUDA tensor, got ", a.device().str());
    run_on_cpu(op, requested, a, b, p, e, out, call);
  }
  return out;
}

bool gemm_quantizes_a(Backend requested, const at::Tensor& weight, const ScaledEpilogueParams& e,
                      const QuantizeParams& xq) {
  if (!weight.is_cuda() || e.asymmetric() || !skinny::quantizes_in_kernel(xq)) return false;
  const DeviceInfo dev = device_info(weight.device());
  Backend backend = Backend::kAuto;
  if (!resolve_gpu_backend(requested, dev, e, &backend).empty()) return false;  // the plain path names the error
  const int64_t n = weight.size(0);
  const bool packed = weight.scalar_type() == at::kByte;  // quant_linear's 4-bit weight
  return runs_on_skinny(backend, static_cast<int>(xq.m), static_cast<int>(n), static_cast<int>(xq.k), dev, packed) &&
         (packed ? skinny::packed_b_fits(describe(weight, false), n)
                 : operand_fits(Backend::kSkinny, describe(weight, false), n, xq.k));
}

at::Tensor scaled_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                       const std::optional<at::Tensor>& bias, std::optional<at::ScalarType> out_dtype,
                       std::string_view backend_arg, const std::optional<at::Tensor>& zero_point_a,
                       const std::optional<at::Tensor>& colsum_b) {
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
  const int64_t kb = std::max<int64_t>(1, scale_blocks(k));
  ScaledEpilogueParams e;
  e.a = describe_scale_a(scale_a, m, kb);
  e.b = describe_scale_b(scale_b, n, kb);
  const at::Tensor bias_f32 = checked_bias_f32(kOp, bias, n, a, "a");
  if (zero_point_a.has_value()) {
    e.a_zero = checked_zero_point(kOp, *zero_point_a, "zero_point_a", m, a, "a");
    if (a.is_cpu()) check_static_zero_point_values(kOp, "zero_point_a", *zero_point_a);
  }
  TORCH_CHECK_VALUE(zero_point_a.has_value() || !colsum_b.has_value(), kOp,
                    ": argument 'colsum_b' is used only with 'zero_point_a'");
  at::Tensor colsum = checked_colsum(kOp, colsum_b, "colsum_b", n, a, "a");
  TORCH_CHECK_VALUE(!e.asymmetric() || !e.per_block(), kOp,
                    ": argument 'zero_point_a' needs scales that do not change along K (scale_a per tensor or per "
                    "token, scale_b per tensor or per channel)");
  TORCH_CHECK_VALUE(e.per_block() || k <= kMaxUnblockedK, kOp, ": K = ", num(k), " > ", num(kMaxUnblockedK),
                    " could overflow the int32 accumulator without per-block scales; pass scale_a as [M, ceil(K/128)]"
                    " (per-block 1x128)");
  ScaledGemmCall call;
  if (e.asymmetric()) {
    check_asymmetric_k(kOp, k, "zero_point_a");
    call.colsum_i32 = colsum.defined() ? colsum : at::sum(b, {0}, /*keepdim=*/false, at::kInt);  // sum_k B[k, n]
  }
  return scaled_gemm_impl(kOp, requested, a, b, e, bias_f32, dtype, call);
}

TORCH_LIBRARY_IMPL(tcgemm, CPU, m) { m.impl("scaled_gemm", &scaled_gemm); }
TORCH_LIBRARY_IMPL(tcgemm, CUDA, m) { m.impl("scaled_gemm", &scaled_gemm); }

}  // namespace tcgemm

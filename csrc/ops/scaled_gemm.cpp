// tcgemm::scaled_gemm: int8 x int8 -> bf16 / fp16 / fp32 with the scales, bias and conversion
// fused into the GEMM's epilogue (per-block scales: into its main loop). Validation, the scale
// granularity read off the scale shapes, output allocation, launch.
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
#include "ops/torch_api.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.scaled_gemm";

void check_scale_tensor(const Tensor& s, const char* name, const Tensor& a) {
  TCGEMM_CHECK_TYPE(dtype_of(s) == ScalarType::Float, kOp, ": argument '", name,
                    "' must have dtype torch.float32, got ", dtype_name(dtype_of(s)));
  check_same_device(kOp, s, name, a);
}

// The shapes common/scale_layout.h decodes; the messages list them.
ScaleOperand describe_scale_a(const Tensor& s, int64_t m, int64_t kb) {
  const std::optional<ScaleOperand> op = s.dim() <= 2 ? decode_scale_a(scale_tensor(s), m, kb) : std::nullopt;
  TCGEMM_CHECK_VALUE(op.has_value(), kOp, ": argument 'scale_a' must have shape ", scale_a_shapes(m, kb), ", got ",
                     shape_str(s));
  return *op;
}

ScaleOperand describe_scale_b(const Tensor& s, int64_t n, int64_t kb) {
  const std::optional<ScaleOperand> op = s.dim() <= 2 ? decode_scale_b(scale_tensor(s), n, kb) : std::nullopt;
  TCGEMM_CHECK_VALUE(op.has_value(), kOp, ": argument 'scale_b' must have shape ", scale_b_shapes(n, kb), ", got ",
                     shape_str(s));
  return *op;
}

// The int32 zero points `name` of the M rows of A: one element (per tensor) or [M, 1].
ZeroPointOperand checked_zero_point(const char* op, const Tensor& z, const char* name, int64_t m, const Tensor& ref,
                                    const char* ref_name) {
  TCGEMM_CHECK_TYPE(dtype_of(z) == ScalarType::Int, op, ": argument '", name, "' must have dtype torch.int32, got ",
                    dtype_name(dtype_of(z)));
  check_same_device(op, z, name, ref, ref_name);
  const bool per_tensor = z.numel() == 1 && z.dim() <= 2;
  TCGEMM_CHECK_VALUE(per_tensor || (z.dim() == 2 && z.size(0) == m && z.size(1) == 1), op, ": argument '", name,
                     "' must have shape [] or [1] (per-tensor) or [M, 1] = [", num(m), ", 1] (per-token), got ",
                     shape_str(z));
  ZeroPointOperand zp;
  zp.ptr = const_data<int32_t>(z);
  zp.stride_row = per_tensor || m == 1 ? 0 : z.stride(0);
  return zp;
}

ScalarType check_out_dtype(const std::optional<ScalarType>& out_dtype) {
  const ScalarType t = out_dtype.value_or(ScalarType::BFloat16);
  TCGEMM_CHECK_TYPE(t == ScalarType::BFloat16 || t == ScalarType::Half || t == ScalarType::Float, kOp,
                    ": argument 'out_dtype' must be torch.bfloat16, torch.float16 or torch.float32, got ",
                    dtype_name(t));
  return t;
}

OutType out_type_of(ScalarType t) {
  if (t == ScalarType::BFloat16) return OutType::kBf16;
  if (t == ScalarType::Half) return OutType::kFp16;
  return OutType::kFp32;
}

// p's B as the packed 4-bit weight of `call` (ScaledGemmCall::b_int4), with its int8 group scales
// and zero points ([N, K / 128], rows contiguous; or null) and its scale groups.
void describe_packed_b(GemmProblem& p, const ScaledGemmCall& call, const Tensor* group_scale,
                       const Tensor* zero_point) {
  p.b_int4 = true;
  p.b.is_signed = true;  // the 4-bit values are two's complement (the bytes are uint8)
  p.b_group_scale = group_scale ? const_data<int8_t>(*group_scale) : nullptr;
  p.b_group_scale_stride = group_scale ? group_scale->size(1) : 0;
  p.b_zero_point = zero_point ? const_data<int8_t>(*zero_point) : nullptr;
  p.b_zero_point_stride = zero_point ? zero_point->size(1) : 0;
  p.b_scale_groups = call.b_scale_groups;
}

// A packed 4-bit B (p.b_int4) replaced in p by its unpacked int8 weight, which is returned (it
// must outlive the launch).
Tensor unpack_b(GemmProblem& p, const Tensor& b, const ScaledGemmCall& call) {
  Tensor w = unpack_int4_to_int8(b, call.b_group_scale, p.k, call.b_zero_point);
  p.b = describe(w, false);
  p.b_int4 = false;
  p.b_group_scale = nullptr;
  p.b_zero_point = nullptr;
  return w;
}

void run_cuda(const char* op, Backend requested, const Tensor& a, const Tensor& b, GemmProblem& p,
              const ScaledEpilogueParams& e, const ScaledGemmCall& call) {
  const CudaDeviceScope scope(a.get_device_index());
  const DeviceInfo dev = device_info(a);
  if (call.quantize_a != nullptr) {  // gemm_quantizes_a chose the skinny kernel, which reads B in place
    p.stream = current_cuda_stream(a.get_device_index());
    p.pdl = call.overlap && has_pdl(dev);
    run_skinny_quantizing(p, e, *call.quantize_a, dev);
    return;
  }
  Backend backend = Backend::kAuto;
  if (p.b_scale_groups > 1) {  // fp32 scales per 32 or 64 inputs: the skinny kernel's promotion only
    TCGEMM_CHECK_VALUE(requested == Backend::kAuto || requested == Backend::kSkinny, op,
                       ": 4-bit weights with scales per 32 or 64 inputs run on the skinny kernel only (backend "
                       "'auto' or 'skinny'), got backend '", backend_name(requested), "'");
    requested = Backend::kSkinny;
  }
  const std::string why_not = resolve_gpu_backend(requested, dev, e, &backend);
  TCGEMM_CHECK_VALUE(why_not.empty(), op, ": ", why_not, " (argument 'backend')");
  // Scales per group: a packed weight the skinny kernel cannot read in place (rows not 16-byte
  // aligned: K not a multiple of 32) is copied into rows that it can.
  std::optional<Tensor> packed_copy;
  if (p.b_scale_groups > 1 && !skinny::packed_b_fits(p.b, p.n)) {
    packed_copy = k_major_copy(b, false);
    p.b = describe(*packed_copy, false);
    p.b.is_signed = true;  // two's complement 4-bit values (scaled_gemm_impl)
  }
  const bool native_int4 = p.b_int4 && reads_packed_b(backend, p, dev, e.per_block());
  // A packed B the kernel does not read as it is: unpacked by the GEMM kernel as it runs (into a
  // buffer it fills, with flags), or by a pass before it.
  std::optional<Tensor> unpacked;
  std::optional<InGemmUnpacking> in_gemm;
  if (p.b_int4 && !native_int4 && unpacks_in_gemm(backend, p, dev, e.per_block())) {
    unpacked = in_gemm.emplace(p, b).buffer;
  } else if (p.b_int4 && !native_int4) {
    unpacked = unpack_b(p, b, call);
  }
  // alive until the launch is enqueued; a packed B read as it is stays out of it
  const OperandCopies copies =
      native_int4 ? OperandCopies{} : fit_operands(backend, a, unpacked ? *unpacked : b, p, call.b_rows);
  TCGEMM_CHECK_INTERNAL(!in_gemm || !copies.b, "tcgemm: the buffer an unpacking GEMM fills was copied");
  p.stream = current_cuda_stream(a.get_device_index());
  // An operand copy (or the unpacking) is a kernel between the quantize and the GEMM that writes
  // what the GEMM reads before its griddep_wait: no overlap then. The pass that orders A for the W4
  // kernel overlaps both ways: it waits for the quantize, and the W4 kernel reads A after its wait.
  p.pdl = call.overlap && has_pdl(dev) && !copies.a && !copies.b && !unpacked && !packed_copy;
  // A quantized into the W4 K order must reach the W4 kernel (gemm_reads_w4_order decided so from
  // the same facts); any other kernel would read it in the wrong order.
  TCGEMM_CHECK_INTERNAL(!p.a_w4_order || (native_int4 && !copies.a && a_w4_order(backend, p, dev, e.per_block())),
                        "tcgemm: A in the W4 K order, but the W4 kernel does not run this problem");
  const std::optional<Tensor> ordered =
      native_int4 && !p.a_w4_order ? w4_ordered_a(backend, p, dev, e.per_block(), a) : std::nullopt;
  run_gpu(backend, p, e, dev);
}

void run_on_cpu(const char* op, Backend requested, const Tensor& a, const Tensor& b, GemmProblem& p,
                const ScaledEpilogueParams& e, const Tensor& out, const ScaledGemmCall& call) {
  const std::optional<Tensor> unpacked = p.b_int4 ? std::optional<Tensor>(unpack_b(p, b, call)) : std::nullopt;
  const OperandCopies k_major = cpu_k_major_operands(op, requested, a, unpacked ? *unpacked : b, p, call.b_rows);
  // fp32 results, rounded once to the output dtype by torch (round to nearest even).
  const bool direct = dtype_of(out) == ScalarType::Float;
  const Tensor f32 = direct ? out : empty(sizes_of(out), ScalarType::Float, out);
  p.d = Output{data<float>(f32), p.n, OutType::kFp32};
  cpu_parallel_for(p.m, cpu_row_grain(p), [&](int64_t begin, int64_t end) { run_cpu(p, e, begin, end); });
  if (!direct) copy_into(out, f32);
}

}  // namespace

ScaleTensor scale_tensor(const Tensor& s) {
  ScaleTensor t;
  t.ptr = data<float>(s);
  t.dim = static_cast<int>(s.dim());
  for (int i = 0; i < t.dim && i < 2; ++i) {
    t.sizes[i] = s.size(i);
    t.strides[i] = s.stride(i);
  }
  return t;
}

const Tensor* checked_colsum(const char* op, const std::optional<Tensor>& colsum, const char* name, int64_t n,
                             const Tensor& ref, const char* ref_name, std::optional<Tensor>& copy) {
  if (!colsum.has_value()) return nullptr;
  TCGEMM_CHECK_TYPE(dtype_of(*colsum) == ScalarType::Int, op, ": argument '", name,
                    "' must have dtype torch.int32, got ", dtype_name(dtype_of(*colsum)));
  check_same_device(op, *colsum, name, ref, ref_name);
  TCGEMM_CHECK_VALUE(colsum->dim() == 1 && colsum->size(0) == n, op, ": argument '", name, "' must have shape [N] = [",
                     num(n), "], got ", shape_str(*colsum));
  return &dense(*colsum, copy);
}

void check_asymmetric_k(const char* op, int64_t k, const char* zero_name) {
  TCGEMM_CHECK_VALUE(k <= kMaxAsymmetricK, op, ": K = ", num(k), " > ", num(kMaxAsymmetricK),
                     " could overflow the int32 sums with zero points (argument '", zero_name, "')");
}

const Tensor* checked_bias_f32(const char* op, const std::optional<Tensor>& bias, int64_t n, const Tensor& ref,
                               const char* ref_name, std::optional<Tensor>& copy) {
  if (!bias.has_value()) return nullptr;
  TCGEMM_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == n, op, ": argument 'bias' must have shape [N] = [", num(n),
                     "], got ", shape_str(*bias));
  TCGEMM_CHECK_TYPE(is_floating(dtype_of(*bias)), op, ": argument 'bias' must have a floating-point dtype, got ",
                    dtype_name(dtype_of(*bias)));
  check_same_device(op, *bias, "bias", ref, ref_name);
  return &float_dense(*bias, copy);
}

Tensor scaled_gemm_impl(const char* op, Backend requested, const Tensor& a, const Tensor& b, ScaledEpilogueParams e,
                        const Tensor* bias_f32, ScalarType out_dtype, const ScaledGemmCall& call) {
  // A quantized in the kernel is never read as int8: an empty K-major description stands for it.
  Operand in_kernel;
  in_kernel.stride_k = 1;
  const Operand* a_rows = call.quantize_a != nullptr ? &in_kernel : call.a_rows;
  const bool described = a_rows != nullptr;
  const int64_t m = described ? call.m : a.size(0), k = described ? call.k : a.size(1);
  const int64_t n = b.size(call.b_rows ? 0 : 1);
  e.bias = bias_f32 ? const_data<float>(*bias_f32) : nullptr;
  e.b_colsum = call.colsum_i32 ? const_data<int32_t>(*call.colsum_i32) : nullptr;
  // Contiguous in the caller's shape: its M rows of N are the kernels' [M, N] with row stride N.
  Tensor out = call.out_shape == nullptr ? empty({m, n}, out_dtype, a) : empty(*call.out_shape, out_dtype, a);
  if (m == 0 || n == 0) return out;
  if (k == 0) {  // every sum is zero: out = bias
    if (bias_f32) {
      copy_into(out, *bias_f32);  // broadcast over the rows
    } else {
      zero(out);
    }
    return out;
  }
  GemmProblem p = described ? gemm_problem(*a_rows, m, k, b, out.data_ptr(), n, out_type_of(out_dtype), call.b_rows)
                            : gemm_problem(a, b, out.data_ptr(), n, out_type_of(out_dtype), call.b_rows);
  std::optional<Tensor> group_scale_copy;
  const Tensor* group_scale = call.b_group_scale != nullptr ? &dense(*call.b_group_scale, group_scale_copy) : nullptr;
  std::optional<Tensor> zero_point_copy;
  const Tensor* zero_point = call.b_zero_point != nullptr ? &dense(*call.b_zero_point, zero_point_copy) : nullptr;
  if (call.b_int4) describe_packed_b(p, call, group_scale, zero_point);
  if (call.a_w4_rowsum != nullptr) {
    p.a_w4_order = true;
    p.a_w4_rowsum = call.a_w4_rowsum;
  }
  if (is_cuda(a)) {
    run_cuda(op, requested, a, b, p, e, call);
  } else {
    TCGEMM_CHECK_VALUE(is_cpu(a), op, ": argument 'a' must be a CPU or CUDA tensor, got ", device_str(a));
    run_on_cpu(op, requested, a, b, p, e, out, call);
  }
  return out;
}

bool gemm_quantizes_a(Backend requested, const Tensor& weight, const ScaledEpilogueParams& e,
                      const QuantizeParams& xq, bool zero_points, int scale_groups) {
  if (!is_cuda(weight) || e.asymmetric()) return false;
  const DeviceInfo dev = device_info(weight);
  const int m = static_cast<int>(xq.m), n = static_cast<int>(weight.size(0)), k = static_cast<int>(xq.k);
  const bool packed = dtype_of(weight) == ScalarType::Byte;  // quant_linear's 4-bit weight
  // One row of x over a K split between cluster blocks is quantized a part per block.
  if (!skinny::quantizes_in_kernel(xq, packed ? skinny_int4_split(m, n, k, dev, e.per_block()) : 1)) return false;
  Backend backend = Backend::kAuto;
  if (!resolve_gpu_backend(requested, dev, e, &backend).empty()) return false;  // the plain path names the error
  if (runs_on_gemv(backend, m, n, k, describe(weight, false), packed, e.per_block())) return false;
  // Zero points: never on the W4 kernel, and on the skinny kernel with fp32 scales per K block only.
  if (zero_points && !e.per_block()) return false;
  // Scales per 32 or 64 inputs: the skinny kernel at every M (run_cuda).
  if (scale_groups > 1)
    return (requested == Backend::kAuto || requested == Backend::kSkinny) && dev.major >= 8 &&
           skinny::packed_b_fits(describe(weight, false), n);
  return runs_on_skinny(backend, m, n, k, dev, packed) &&
         !(packed && !zero_points && runs_on_w4(backend, m, n, k, describe(weight, false), dev, e.per_block())) &&
         (packed ? skinny::packed_b_fits(describe(weight, false), n)
                 : operand_fits(Backend::kSkinny, describe(weight, false), n, xq.k));
}

bool gemm_reads_w4_order(Backend requested, const Tensor& weight, const ScaledEpilogueParams& e,
                         const ScaledGemmCall& call) {
  // run_cuda's choices before the W4 kernel: scales per 32 or 64 inputs go to the skinny kernel.
  if (!call.b_int4 || !is_cuda(weight) || call.b_scale_groups > 1 || e.asymmetric()) return false;
  const DeviceInfo dev = device_info(weight);
  Backend backend = Backend::kAuto;
  if (!resolve_gpu_backend(requested, dev, e, &backend).empty()) return false;
  Operand a;  // the int8 rows, K-major and signed, as quant_linear writes them
  a.stride_row = call.k;
  a.stride_k = 1;
  GemmProblem p = gemm_problem(a, call.m, call.k, weight, nullptr, weight.size(0), OutType::kBf16, call.b_rows);
  describe_packed_b(p, call, call.b_group_scale, call.b_zero_point);  // read where they are: only their presence counts
  return a_w4_order(backend, p, dev, e.per_block());
}

Tensor scaled_gemm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                   const std::optional<Tensor>& bias, std::optional<ScalarType> out_dtype, std::string_view backend_arg,
                   const std::optional<Tensor>& zero_point_a, const std::optional<Tensor>& colsum_b) {
  const Backend requested = parse_backend_arg(kOp, backend_arg);
  check_operand(kOp, a, "a", "[M, K]", /*signed_only=*/true);
  check_operand(kOp, b, "b", "[K, N]", /*signed_only=*/true);
  check_same_device(kOp, b, "b", a);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TCGEMM_CHECK_VALUE(b.size(0) == k, kOp, ": K mismatch: 'a' is [M, K] = ", shape_str(a),
                     " but 'b' is [K, N] = ", shape_str(b));
  const ScalarType dtype = check_out_dtype(out_dtype);
  check_scale_tensor(scale_a, "scale_a", a);
  check_scale_tensor(scale_b, "scale_b", a);
  const int64_t kb = std::max<int64_t>(1, scale_blocks(k));
  ScaledEpilogueParams e;
  e.a = describe_scale_a(scale_a, m, kb);
  e.b = describe_scale_b(scale_b, n, kb);
  std::optional<Tensor> bias_copy, colsum_copy;
  const Tensor* bias_f32 = checked_bias_f32(kOp, bias, n, a, "a", bias_copy);
  if (zero_point_a.has_value()) {
    e.a_zero = checked_zero_point(kOp, *zero_point_a, "zero_point_a", m, a, "a");
    if (is_cpu(a)) check_static_zero_point_values(kOp, "zero_point_a", *zero_point_a);
  }
  TCGEMM_CHECK_VALUE(zero_point_a.has_value() || !colsum_b.has_value(), kOp,
                     ": argument 'colsum_b' is used only with 'zero_point_a'");
  const Tensor* colsum = checked_colsum(kOp, colsum_b, "colsum_b", n, a, "a", colsum_copy);
  TCGEMM_CHECK_VALUE(!e.asymmetric() || !e.per_block(), kOp,
                     ": argument 'zero_point_a' needs scales that do not change along K (scale_a per tensor or per "
                     "token, scale_b per tensor or per channel)");
  TCGEMM_CHECK_VALUE(e.per_block() || k <= kMaxUnblockedK, kOp, ": K = ", num(k), " > ", num(kMaxUnblockedK),
                     " could overflow the int32 accumulator without per-block scales; pass scale_a as [M, ceil(K/128)]"
                     " (per-block 1x128)");
  ScaledGemmCall call;
  if (e.asymmetric()) {
    check_asymmetric_k(kOp, k, "zero_point_a");
    if (colsum == nullptr) colsum = &colsum_copy.emplace(sum_int32(b, 0));  // sum_k B[k, n]
    call.colsum_i32 = colsum;
  }
  return scaled_gemm_impl(kOp, requested, a, b, e, bias_f32, dtype, call);
}

namespace {

// The registered kernel, in the types the stable ABI unboxes to.
Tensor scaled_gemm_kernel(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                          const std::optional<Tensor>& bias, std::optional<ScalarType> out_dtype,
                          const std::string& backend, const std::optional<Tensor>& zero_point_a,
                          const std::optional<Tensor>& colsum_b) {
  return scaled_gemm(a, b, scale_a, scale_b, bias, out_dtype, backend, zero_point_a, colsum_b);
}

void register_kernels(Library& m) {
  m.impl("scaled_gemm", TCGEMM_BOX(scaled_gemm_kernel));
}

}  // namespace

TCGEMM_IMPL_CPU_AND_CUDA(register_kernels)

}  // namespace tcgemm

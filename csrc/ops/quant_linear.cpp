// tcgemm::quant_linear: the W8A8 linear layer (QuantLinear.forward) as one op. The float input
// (times the SmoothQuant multipliers, if any) is quantized per token or per 1x128 block, or with
// a calibrated per-tensor scale, symmetric or with a zero point (asymmetric: per token or static
// per tensor, with the weight's column sums correcting the GEMM's epilogue), and multiplied by
// the int8 weight with the scales and bias fused into the GEMM: the kernels of tcgemm.quantize
// and tcgemm.scaled_gemm, the same bits, behind one dispatch and one set of checks. At a few rows
// with symmetric scales the skinny GEMM kernel quantizes x itself (one kernel); otherwise,
// on sm_90+, the two kernels are programmatic dependent launches (common/launch_kernel.cuh): the
// few-rows GEMM streams its weights while the activations are quantized (docs/design/decode.md).
// Rotated (rotate=True, tcgemm.rotation): the quantize kernel rotates each 128-value block of x
// before quantizing it, so such a layer is always the two kernels (rotating in the skinny kernel's
// own quantization instead: docs/design/int4.md).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/cuda_check.h"
#include "common/math.h"
#include "common/scale_layout.h"
#include "ops/ops.h"
#include "ops/tensor_args.h"
#include "ops/torch_api.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.quant_linear";

// The activations' quantization: dynamic per token ("token") or per 1x128 block ("block"), or
// static per tensor with the given input_scale ("static").
QuantGranularity parse_activation(std::string_view a) {
  if (a == "token") return QuantGranularity::kToken;
  if (a == "static") return QuantGranularity::kTensor;
  TCGEMM_CHECK_VALUE(a == "block", kOp, ": argument 'activation' must be 'token', 'block' or 'static', got '",
                     std::string(a), "'");
  return QuantGranularity::kGroup;
}

void check_input_scale(const std::optional<Tensor>& s, std::string_view activation, const Tensor& x) {
  const bool is_static = activation == "static";
  TCGEMM_CHECK_VALUE(!is_static || s.has_value(), kOp, ": argument 'input_scale' is required with activation='static'");
  TCGEMM_CHECK_VALUE(is_static || !s.has_value(), kOp,
                     ": argument 'input_scale' is used only with activation='static', got activation='",
                     std::string(activation), "'");
  if (!s.has_value()) return;
  TCGEMM_CHECK_TYPE(dtype_of(*s) == ScalarType::Float, kOp,
                    ": argument 'input_scale' must have dtype torch.float32, got ", dtype_name(dtype_of(*s)));
  TCGEMM_CHECK_VALUE(s->numel() == 1 && s->dim() <= 2, kOp,
                     ": argument 'input_scale' must have one element (shape [], [1] or [1, 1]), got shape ",
                     shape_str(*s));
  check_same_device(kOp, *s, "input_scale", x, "x");
}

// Asymmetric activations: per token or static, a per-channel (or per-tensor) weight scale; a
// static zero point exactly when the activation is static.
void check_asymmetric(bool asymmetric, std::string_view activation, const ScaledEpilogueParams& e,
                      const std::optional<Tensor>& input_zero_point, const std::optional<Tensor>& weight_colsum,
                      const Tensor& x) {
  const bool is_static = activation == "static";
  if (!asymmetric) {
    TCGEMM_CHECK_VALUE(!input_zero_point.has_value() && !weight_colsum.has_value(), kOp,
                       ": arguments 'input_zero_point' and 'weight_colsum' are used only with asymmetric=True");
    return;
  }
  TCGEMM_CHECK_VALUE(activation != "block", kOp,
                     ": asymmetric=True needs activation='token' or 'static', got activation='block'");
  TCGEMM_CHECK_VALUE(!e.b.per_block(), kOp,
                     ": asymmetric=True needs a per-channel 'weight_scale' [N] (zero points are not applied per K "
                     "block)");
  TCGEMM_CHECK_VALUE(!is_static || input_zero_point.has_value(), kOp,
                     ": argument 'input_zero_point' is required with activation='static' and asymmetric=True");
  TCGEMM_CHECK_VALUE(is_static || !input_zero_point.has_value(), kOp,
                     ": argument 'input_zero_point' is used only with activation='static', got activation='",
                     std::string(activation), "'");
  if (input_zero_point.has_value()) {
    TCGEMM_CHECK_TYPE(dtype_of(*input_zero_point) == ScalarType::Int, kOp,
                      ": argument 'input_zero_point' must have dtype torch.int32, got ",
                      dtype_name(dtype_of(*input_zero_point)));
    TCGEMM_CHECK_VALUE(input_zero_point->numel() == 1 && input_zero_point->dim() <= 2, kOp,
                       ": argument 'input_zero_point' must have one element (shape [], [1] or [1, 1]), got shape ",
                       shape_str(*input_zero_point));
    check_same_device(kOp, *input_zero_point, "input_zero_point", x, "x");
  }
}

// Copies the one element of a validated static scale or zero point `src` (on x's device) to
// `dst`, on x's stream: the start of the returned copy that the quantize kernel marks.
template <class T>
void copy_one_element(const Tensor& src, T* dst, const Tensor& x) {
  if (is_cuda(x)) {
    const CudaDeviceScope scope(x.get_device_index());
    const cudaStream_t stream = current_cuda_stream(x.get_device_index());
    TCGEMM_CUDA_CHECK(cudaMemcpyAsync(dst, const_data<T>(src), sizeof(T), cudaMemcpyDeviceToDevice, stream));
  } else {
    *dst = *const_data<T>(src);
  }
}

// The weight's scales; `groups` (ScaledGemmCall::b_scale_groups) is 2 or 4 for a 4-bit (`packed`)
// weight's scales per 64 or 32 inputs, else 1. Those may be bf16 or fp16 (what checkpoints hold,
// read in place: ScaleOperand::dtype); every other table is fp32.
ScaleOperand describe_weight_scale(const Tensor& s, int64_t n, int64_t k, bool packed, int& groups) {
  const ScalarType t = dtype_of(s);
  const bool half = t == ScalarType::BFloat16 || t == ScalarType::Half;
  TCGEMM_CHECK_TYPE(t == ScalarType::Float || half, kOp,
                    ": argument 'weight_scale' must have dtype torch.float32 (or, for 4-bit scales per 64 or 32 "
                    "inputs, torch.bfloat16 or torch.float16), got ", dtype_name(t));
  const int64_t kb = scale_blocks(k);
  groups = packed && s.dim() == 2 ? weight_scale_groups(scale_tensor(s), n, k) : 1;
  TCGEMM_CHECK_TYPE(!half || groups > 1, kOp,
                    ": argument 'weight_scale' must have dtype torch.float32 for scales other than 4-bit ones per 64 "
                    "or 32 inputs, got ", dtype_name(t));
  const std::optional<ScaleOperand> op =
      s.dim() > 2   ? std::nullopt
      : groups > 1 ? decode_scale_b_blocks(scale_tensor(s), n, s.size(1))  // [N, groups]: one per row
                    : decode_weight_scale(scale_tensor(s), n, kb);
  TCGEMM_CHECK_VALUE(op.has_value(), kOp, ": argument 'weight_scale' must have shape ", weight_scale_shapes(n, kb),
                     packed ? ", or, 4-bit per group of 64 or 32 inputs, [N, ceil(K/64)] = [" + num(n) + ", " +
                                  num((k + 63) / 64) + "] or [N, ceil(K/32)] = [" + num(n) + ", " + num((k + 31) / 32) +
                                  "]"
                            : std::string(),
                     ", got ", shape_str(s));
  ScaleOperand described = *op;
  described.dtype = t == ScalarType::BFloat16 ? ScaleDtype::kBf16 : t == ScalarType::Half ? ScaleDtype::kF16
                                                                                          : ScaleDtype::kF32;
  return described;
}

}  // namespace

Tensor quant_linear(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                    const std::optional<Tensor>& bias, std::string_view activation_arg,
                    const std::optional<Tensor>& input_scale, const std::optional<Tensor>& smooth,
                    std::string_view backend_arg, bool asymmetric, const std::optional<Tensor>& input_zero_point,
                    const std::optional<Tensor>& weight_colsum, const std::optional<Tensor>& weight_group_scale,
                    bool rotate, const std::optional<Tensor>& weight_zero_point) {
  const Backend requested = parse_backend_arg(kOp, backend_arg);
  const QuantGranularity granularity = parse_activation(activation_arg);
  const std::optional<QuantDtype> dtype = quant_dtype_of(dtype_of(x));
  TCGEMM_CHECK_TYPE(dtype.has_value(), kOp,
                    ": argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, got ",
                    dtype_name(dtype_of(x)));
  TCGEMM_CHECK_VALUE(x.dim() >= 1, kOp, ": argument 'x' must have at least one dimension [..., K], got a 0-D tensor");
  const bool packed = dtype_of(weight) == ScalarType::Byte;  // 4-bit, two values per byte along K
  if (packed) {
    check_packed_weight(kOp, weight, "weight", x.size(x.dim() - 1), "the last dimension of 'x'");
  } else {
    check_operand(kOp, weight, "weight", "[N, K]", /*signed_only=*/true);
  }
  check_same_device(kOp, weight, "weight", x, "x");
  const int64_t n = weight.size(0), k = packed ? x.size(x.dim() - 1) : weight.size(1);
  TCGEMM_CHECK_VALUE(x.size(x.dim() - 1) == k, kOp, ": in_features mismatch: 'x' is [..., K] = ", shape_str(x),
                     " but 'weight' is [N, K] = ", shape_str(weight));
  ScaledEpilogueParams e;
  int scale_groups = 1;
  e.b = describe_weight_scale(weight_scale, n, k, packed, scale_groups);
  check_same_device(kOp, weight_scale, "weight_scale", x, "x");
  const Tensor* group_scale = weight_group_scale.has_value() ? &*weight_group_scale : nullptr;
  if (group_scale != nullptr) {  // two-level 4-bit scales
    TCGEMM_CHECK_VALUE(packed, kOp, ": argument 'weight_group_scale' is used only with a 4-bit 'weight' (torch.uint8)");
    TCGEMM_CHECK_VALUE(!e.b.per_block(), kOp,
                       ": argument 'weight_group_scale' (two-level scales) needs a per-channel 'weight_scale' [N]");
    check_group_scale(kOp, *group_scale, "weight_group_scale", n, k, x, "x");
  }
  const Tensor* zero_point = weight_zero_point.has_value() ? &*weight_zero_point : nullptr;
  if (zero_point != nullptr) {  // asymmetric 4-bit weights: q - z per 1x128 group
    TCGEMM_CHECK_VALUE(packed, kOp, ": argument 'weight_zero_point' is used only with a 4-bit 'weight' (torch.uint8)");
    TCGEMM_CHECK_VALUE(group_scale == nullptr, kOp,
                       ": arguments 'weight_group_scale' and 'weight_zero_point' exclude each other (asymmetric "
                       "4-bit weights have fp32 scales, no int8 group scales)");
    check_zero_point(kOp, *zero_point, "weight_zero_point", n, k, x, "x");
    TCGEMM_CHECK_VALUE(scale_groups == 1, kOp,
                       ": argument 'weight_zero_point' needs zero points and fp32 scales per 128 inputs ('weight_scale' "
                       "[N] or [N, ceil(K/128)]), got 'weight_scale' ", shape_str(weight_scale));
  }
  std::optional<Tensor> bias_copy, colsum_copy;
  const Tensor* bias_f32 = checked_bias_f32(kOp, bias, n, x, "x", bias_copy);
  check_input_scale(input_scale, activation_arg, x);
  if (smooth.has_value()) check_smooth(kOp, *smooth, x);
  check_asymmetric(asymmetric, activation_arg, e, input_zero_point, weight_colsum, x);
  const Tensor* colsum = checked_colsum(kOp, weight_colsum, "weight_colsum", n, x, "x", colsum_copy);
  TCGEMM_CHECK_VALUE(granularity == QuantGranularity::kGroup || e.b.per_block() || k <= kMaxUnblockedK, kOp,
                     ": K = ", num(k), " > ", num(kMaxUnblockedK),
                     " could overflow the int32 accumulator without per-block scales; use activation='block'");
  if (asymmetric) check_asymmetric_k(kOp, k, "asymmetric");
  if (rotate) check_rotate(kOp, x, granularity, input_scale.has_value(), smooth.has_value(), asymmetric);
  TCGEMM_CHECK_VALUE(is_cpu(x) || is_cuda(x), kOp, ": argument 'x' must be a CPU or CUDA tensor, got ", device_str(x));

  Sizes out_shape = sizes_of(x);
  out_shape.back() = n;
  // [..., K] as rows, read in place (no view: a decode step's host time counts); a reshaped copy
  // only where the leading dimensions do not collapse into one stride.
  std::optional<Tensor> x_copy;
  std::optional<Rows> rows = rows_of(x);
  if (!rows.has_value()) {
    int64_t m = 1;
    for (int64_t i = 0; i + 1 < x.dim(); ++i) m *= x.size(i);
    x_copy = reshape(x, m, k);  // a copy (the sizes given: reshape cannot infer -1 where K = 0)
    rows = rows_of(*x_copy);
  }
  const Tensor& x_rows = x_copy ? *x_copy : x;
  const int64_t m = rows->m;
  if (m == 0 || n == 0 || k == 0) {  // nothing to quantize; with K = 0 every sum is zero: out = bias
    Tensor out = empty(out_shape, dtype_of(x), x);
    if (bias_f32) {
      copy_into(out, *bias_f32);  // broadcast over the rows
    } else {
      zero(out);
    }
    return out;
  }
  if (is_cpu(x)) {  // before the quantization, not after it
    check_cpu_backend(kOp, requested);
    if (input_scale.has_value()) check_static_scale_values(kOp, "input_scale", *input_scale);
    if (input_zero_point.has_value()) check_static_zero_point_values(kOp, "input_zero_point", *input_zero_point);
  }
  ScaledGemmCall call;
  call.overlap = is_cuda(x);
  call.b_rows = true;  // the weight [N, K] (or [N, K/2] packed) as it is
  call.b_int4 = packed;
  call.b_group_scale = group_scale;
  call.b_zero_point = zero_point;
  call.b_scale_groups = scale_groups;
  call.out_shape = &out_shape;
  call.m = m;
  call.k = k;
  // A few rows on the GPU: where the GEMM runs on the skinny kernel, that kernel quantizes x
  // itself (symmetric scales, not rotated): one kernel for the layer, no scratch.
  bool w4_order = false;
  if (is_cuda(x) && !asymmetric) {
    QuantizeParams xq = quantize_params(x_rows, *rows, *dtype, granularity);
    std::optional<Tensor> smooth_copy;
    const Tensor* channel_mul = smooth.has_value() ? &dense(*smooth, smooth_copy) : nullptr;
    if (channel_mul) xq.channel_mul = const_data<float>(*channel_mul);
    if (input_scale.has_value()) xq.scale_in = const_data<float>(*input_scale);  // one element
    e.a = *decode_scale_a(quantize_scales(granularity, nullptr, m, k), m, scale_blocks(k));
    if (!rotate && gemm_quantizes_a(requested, weight, e, xq, zero_point != nullptr, scale_groups)) {
      call.quantize_a = &xq;
      return scaled_gemm_impl(kOp, requested, x, weight, e, bias_f32, dtype_of(x), call);
    }
    // Where the W4 kernel reads x (4-bit weights, 17-512 rows on Hopper), the quantization writes
    // its rows in that kernel's K order with their sums: no ordering pass between the two
    // (QuantizeParams::w4_rowsum says what it takes).
    w4_order = granularity == QuantGranularity::kToken && !input_scale.has_value() &&
               xq.dtype != QuantDtype::kFloat32 && xq.x_as_vectors() && k % kScaleBlock == 0 &&
               gemm_reads_w4_order(requested, weight, e, call);
  }
  AsymmetricArgs asym;
  if (asymmetric) {
    asym.enabled = true;
    asym.zero_point = input_zero_point;
    if (colsum == nullptr) {  // sum_k W[n, k] of the int8 weight (unpacked)
      colsum = &colsum_copy.emplace(
          sum_int32(packed ? unpack_int4_to_int8(weight, group_scale, k, zero_point) : weight, 1));
    }
    call.colsum_i32 = colsum;
  }
  // The quantized rows, their scales and zero points share one scratch allocation (each
  // allocation is host time at decode): rows of round_up(K, 16) bytes, which every backend reads in
  // place, then the scales, then the zero points, then (W4 K order) the rows' sums, each 16-byte
  // aligned. Static: one scale (and zero point) for every row, which starts as a copy of the given
  // one unless one block writes it.
  const bool is_static = input_scale.has_value();
  const int64_t q_stride = round_up<int64_t>(k, 16);
  ScaleTensor st = quantize_scales(granularity, nullptr, m, k);  // static is per tensor: one scale
  const int64_t scales = st.numel();
  const int64_t scale_at = round_up<int64_t>(m * q_stride, 16);
  const int64_t zero_at = round_up<int64_t>(scale_at + 4 * scales, 16);
  const int64_t sum_at = round_up<int64_t>(zero_at + (asymmetric ? 4 * scales : 0), 16);
  const Tensor scratch = empty({sum_at + (w4_order ? 4 * m : 0)}, ScalarType::Byte, x);
  uint8_t* base = data<uint8_t>(scratch);
  QuantizeTargets t;
  t.q = reinterpret_cast<int8_t*>(base);
  t.q_stride_row = q_stride;
  t.scale_out = reinterpret_cast<float*>(base + scale_at);
  t.zero_out = asymmetric ? reinterpret_cast<int32_t*>(base + zero_at) : nullptr;
  t.by_kernel = static_by_one_block(x_rows, *rows, granularity, is_static);
  t.w4_rowsum = w4_order ? reinterpret_cast<int32_t*>(base + sum_at) : nullptr;
  if (is_static && !t.by_kernel) {
    copy_one_element(*input_scale, t.scale_out, x);
    if (asymmetric) copy_one_element(*input_zero_point, t.zero_out, x);
  }
  quantize_to(x_rows, *rows, *dtype, granularity, input_scale, smooth.has_value() ? &*smooth : nullptr, call.overlap,
              asym, t, rotate);

  // The scaled GEMM reads them where they are, in the shape tcgemm.quantize returns them.
  st.ptr = t.scale_out;
  e.a = *decode_scale_a(st, m, scale_blocks(k));
  if (asymmetric) {
    e.a_zero.ptr = t.zero_out;
    e.a_zero.stride_row = is_static ? 0 : 1;
  }
  Operand q_rows;
  q_rows.ptr = t.q;
  q_rows.stride_row = q_stride;
  q_rows.stride_k = 1;
  call.a_rows = &q_rows;
  call.a_w4_rowsum = t.w4_rowsum;
  return scaled_gemm_impl(kOp, requested, scratch, weight, e, bias_f32, dtype_of(x), call);
}

namespace {

// The registered kernel, in the types the stable ABI unboxes to.
Tensor quant_linear_kernel(const Tensor& x, const Tensor& weight, const Tensor& weight_scale,
                           const std::optional<Tensor>& bias, const std::string& activation,
                           const std::optional<Tensor>& input_scale, const std::optional<Tensor>& smooth,
                           const std::string& backend, bool asymmetric, const std::optional<Tensor>& input_zero_point,
                           const std::optional<Tensor>& weight_colsum,
                           const std::optional<Tensor>& weight_group_scale, bool rotate,
                           const std::optional<Tensor>& weight_zero_point) {
  return quant_linear(x, weight, weight_scale, bias, activation, input_scale, smooth, backend, asymmetric,
                      input_zero_point, weight_colsum, weight_group_scale, rotate, weight_zero_point);
}

void register_kernels(Library& m) {
  m.impl("quant_linear", TCGEMM_BOX(quant_linear_kernel));
}

}  // namespace

TCGEMM_IMPL_CPU_AND_CUDA(register_kernels)

}  // namespace tcgemm

// tcgemm::quant_linear: the W8A8 linear layer (QuantLinear.forward) as one op. The float input
// (times the SmoothQuant multipliers, if any) is quantized per token or per 1x128 block, or with
// a calibrated per-tensor scale, symmetric or with a zero point (asymmetric: per token or static
// per tensor, with the weight's column sums correcting the GEMM's epilogue), and multiplied by
// the int8 weight with the scales and bias fused into the GEMM: the kernels of tcgemm.quantize
// and tcgemm.scaled_gemm, the same bits, behind one dispatch and one set of checks. At a few rows
// with symmetric scales the skinny GEMM kernel quantizes x itself (one kernel); otherwise,
// on sm_90+, the two kernels are programmatic dependent launches (common/launch_kernel.cuh): the
// few-rows GEMM streams its weights while the activations are quantized (docs/design/decode.md).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/math.h"
#include "common/scale_layout.h"
#include "ops/ops.h"
#include "ops/tensor_args.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.quant_linear";

// The activations' quantization: dynamic per token ("token") or per 1x128 block ("block"), or
// static per tensor with the given input_scale ("static").
QuantGranularity parse_activation(std::string_view a) {
  if (a == "token") return QuantGranularity::kToken;
  if (a == "static") return QuantGranularity::kTensor;
  TORCH_CHECK_VALUE(a == "block", kOp, ": argument 'activation' must be 'token', 'block' or 'static', got '",
                    std::string(a), "'");
  return QuantGranularity::kGroup;
}

void check_input_scale(const std::optional<at::Tensor>& s, std::string_view activation, const at::Tensor& x) {
  const bool is_static = activation == "static";
  TORCH_CHECK_VALUE(!is_static || s.has_value(), kOp, ": argument 'input_scale' is required with activation='static'");
  TORCH_CHECK_VALUE(is_static || !s.has_value(), kOp,
                    ": argument 'input_scale' is used only with activation='static', got activation='",
                    std::string(activation), "'");
  if (!s.has_value()) return;
  TORCH_CHECK_TYPE(s->scalar_type() == at::kFloat, kOp, ": argument 'input_scale' must have dtype torch.float32, got ",
                   dtype_name(s->scalar_type()));
  TORCH_CHECK_VALUE(s->numel() == 1 && s->dim() <= 2, kOp,
                    ": argument 'input_scale' must have one element (shape [], [1] or [1, 1]), got shape ",
                    shape_str(s->sizes()));
  check_same_device(kOp, *s, "input_scale", x, "x");
}

// Asymmetric activations: per token or static, a per-channel (or per-tensor) weight scale; a
// static zero point exactly when the activation is static.
void check_asymmetric(bool asymmetric, std::string_view activation, const ScaledEpilogueParams& e,
                      const std::optional<at::Tensor>& input_zero_point, const std::optional<at::Tensor>& weight_colsum,
                      const at::Tensor& x) {
  const bool is_static = activation == "static";
  if (!asymmetric) {
    TORCH_CHECK_VALUE(!input_zero_point.has_value() && !weight_colsum.has_value(), kOp,
                      ": arguments 'input_zero_point' and 'weight_colsum' are used only with asymmetric=True");
    return;
  }
  TORCH_CHECK_VALUE(activation != "block", kOp,
                    ": asymmetric=True needs activation='token' or 'static', got activation='block'");
  TORCH_CHECK_VALUE(!e.b.per_block(), kOp,
                    ": asymmetric=True needs a per-channel 'weight_scale' [N] (zero points are not applied per K "
                    "block)");
  TORCH_CHECK_VALUE(!is_static || input_zero_point.has_value(), kOp,
                    ": argument 'input_zero_point' is required with activation='static' and asymmetric=True");
  TORCH_CHECK_VALUE(is_static || !input_zero_point.has_value(), kOp,
                    ": argument 'input_zero_point' is used only with activation='static', got activation='",
                    std::string(activation), "'");
  if (input_zero_point.has_value()) {
    TORCH_CHECK_TYPE(input_zero_point->scalar_type() == at::kInt, kOp,
                     ": argument 'input_zero_point' must have dtype torch.int32, got ",
                     dtype_name(input_zero_point->scalar_type()));
    TORCH_CHECK_VALUE(input_zero_point->numel() == 1 && input_zero_point->dim() <= 2, kOp,
                      ": argument 'input_zero_point' must have one element (shape [], [1] or [1, 1]), got shape ",
                      shape_str(input_zero_point->sizes()));
    check_same_device(kOp, *input_zero_point, "input_zero_point", x, "x");
  }
}

// Copies the one element of a validated static scale or zero point `src` (on x's device) to
// `dst`, on x's stream: the start of the returned copy that the quantize kernel marks.
template <class T>
void copy_one_element(const at::Tensor& src, T* dst, const at::Tensor& x) {
  if (x.is_cuda()) {
    const c10::cuda::CUDAGuard guard(x.device());
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
    C10_CUDA_CHECK(cudaMemcpyAsync(dst, src.const_data_ptr<T>(), sizeof(T), cudaMemcpyDeviceToDevice, stream));
  } else {
    *dst = *src.const_data_ptr<T>();
  }
}

ScaleOperand describe_weight_scale(const at::Tensor& s, int64_t n, int64_t k) {
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, kOp, ": argument 'weight_scale' must have dtype torch.float32, got ",
                   dtype_name(s.scalar_type()));
  const int64_t kb = scale_blocks(k);
  const std::optional<ScaleOperand> op = s.dim() <= 2 ? decode_weight_scale(scale_tensor(s), n, kb) : std::nullopt;
  TORCH_CHECK_VALUE(op.has_value(), kOp, ": argument 'weight_scale' must have shape ", weight_scale_shapes(n, kb),
                    ", got ", shape_str(s.sizes()));
  return *op;
}

}  // namespace

at::Tensor quant_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_scale,
                        const std::optional<at::Tensor>& bias, std::string_view activation_arg,
                        const std::optional<at::Tensor>& input_scale, const std::optional<at::Tensor>& smooth,
                        std::string_view backend_arg, bool asymmetric,
                        const std::optional<at::Tensor>& input_zero_point,
                        const std::optional<at::Tensor>& weight_colsum,
                        const std::optional<at::Tensor>& weight_group_scale) {
  const Backend requested = parse_backend_arg(kOp, backend_arg);
  const QuantGranularity granularity = parse_activation(activation_arg);
  const std::optional<QuantDtype> dtype = quant_dtype_of(x.scalar_type());
  TORCH_CHECK_TYPE(dtype.has_value(), kOp,
                   ": argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, got ",
                   dtype_name(x.scalar_type()));
  TORCH_CHECK_VALUE(x.dim() >= 1, kOp, ": argument 'x' must have at least one dimension [..., K], got a 0-D tensor");
  const bool packed = weight.scalar_type() == at::kByte;  // 4-bit, two values per byte along K
  if (packed) {
    check_packed_weight(kOp, weight, "weight", x.size(-1), "the last dimension of 'x'");
  } else {
    check_operand(kOp, weight, "weight", "[N, K]", /*signed_only=*/true);
  }
  check_same_device(kOp, weight, "weight", x, "x");
  const int64_t n = weight.size(0), k = packed ? x.size(-1) : weight.size(1);
  TORCH_CHECK_VALUE(x.size(-1) == k, kOp, ": in_features mismatch: 'x' is [..., K] = ", shape_str(x.sizes()),
                    " but 'weight' is [N, K] = ", shape_str(weight.sizes()));
  ScaledEpilogueParams e;
  e.b = describe_weight_scale(weight_scale, n, k);
  check_same_device(kOp, weight_scale, "weight_scale", x, "x");
  const at::Tensor* group_scale = weight_group_scale.has_value() ? &*weight_group_scale : nullptr;
  if (group_scale != nullptr) {  // two-level 4-bit scales
    TORCH_CHECK_VALUE(packed, kOp, ": argument 'weight_group_scale' is used only with a 4-bit 'weight' (torch.uint8)");
    TORCH_CHECK_VALUE(!e.b.per_block(), kOp,
                      ": argument 'weight_group_scale' (two-level scales) needs a per-channel 'weight_scale' [N]");
    check_group_scale(kOp, *group_scale, "weight_group_scale", n, k, x, "x");
  }
  const at::Tensor bias_f32 = checked_bias_f32(kOp, bias, n, x, "x");
  check_input_scale(input_scale, activation_arg, x);
  if (smooth.has_value()) check_smooth(kOp, *smooth, x);
  check_asymmetric(asymmetric, activation_arg, e, input_zero_point, weight_colsum, x);
  at::Tensor colsum = checked_colsum(kOp, weight_colsum, "weight_colsum", n, x, "x");
  TORCH_CHECK_VALUE(granularity == QuantGranularity::kGroup || e.b.per_block() || k <= kMaxUnblockedK, kOp, ": K = ",
                    num(k), " > ", num(kMaxUnblockedK),
                    " could overflow the int32 accumulator without per-block scales; use activation='block'");
  if (asymmetric) check_asymmetric_k(kOp, k, "asymmetric");
  TORCH_CHECK_VALUE(x.is_cpu() || x.is_cuda(), kOp, ": argument 'x' must be a CPU or CUDA tensor, got ",
                    x.device().str());

  std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end() - 1);
  out_shape.push_back(n);
  // [..., K] as rows, read in place (no view: a decode step's host time counts); a reshaped copy
  // only where the leading dimensions do not collapse into one stride.
  at::Tensor x_rows = x;
  std::optional<Rows> rows = rows_of(x);
  if (!rows.has_value()) {
    x_rows = x.flatten(0, -2);  // a copy (K = 0 included: reshape cannot infer -1 then)
    rows = rows_of(x_rows);
  }
  const int64_t m = rows->m;
  if (m == 0 || n == 0 || k == 0) {  // nothing to quantize; with K = 0 every sum is zero: out = bias
    at::Tensor out = at::empty(out_shape, x.options());
    if (bias_f32.defined()) {
      out.copy_(bias_f32.expand(out.sizes()));
    } else {
      out.zero_();
    }
    return out;
  }
  if (x.is_cpu()) {  // before the quantization, not after it
    check_cpu_backend(kOp, requested);
    if (input_scale.has_value()) check_static_scale_values(kOp, "input_scale", *input_scale);
    if (input_zero_point.has_value()) check_static_zero_point_values(kOp, "input_zero_point", *input_zero_point);
  }
  ScaledGemmCall call;
  call.overlap = x.is_cuda();
  call.b_rows = true;  // the weight [N, K] (or [N, K/2] packed) as it is
  call.b_int4 = packed;
  call.b_group_scale = group_scale;
  call.out_shape = out_shape;
  call.m = m;
  call.k = k;
  // A few rows on the GPU: where the GEMM runs on the skinny kernel, that kernel quantizes x
  // itself (symmetric scales): one kernel for the layer, no scratch.
  if (x.is_cuda() && !asymmetric) {
    QuantizeParams xq = quantize_params(x_rows, *rows, *dtype, granularity);
    const at::Tensor channel_mul = smooth.has_value() ? smooth->contiguous() : at::Tensor();
    if (channel_mul.defined()) xq.channel_mul = channel_mul.const_data_ptr<float>();
    if (input_scale.has_value()) xq.scale_in = input_scale->const_data_ptr<float>();  // one element
    e.a = *decode_scale_a(quantize_scales(granularity, nullptr, m, k), m, scale_blocks(k));
    if (gemm_quantizes_a(requested, weight, e, xq)) {
      call.quantize_a = &xq;
      return scaled_gemm_impl(kOp, requested, x, weight, e, bias_f32, x.scalar_type(), call);
    }
  }
  AsymmetricArgs asym;
  if (asymmetric) {
    asym.enabled = true;
    asym.zero_point = input_zero_point;
    if (colsum.defined()) {
      call.colsum_i32 = colsum;
    } else {  // sum_k W[n, k] of the int8 weight (unpacked)
      call.colsum_i32 = at::sum(packed ? unpack_int4_to_int8(weight, group_scale, k) : weight, {1}, false, at::kInt);
    }
  }
  // The quantized rows, their scales and zero points share one scratch allocation (each
  // allocation is host time at decode): rows of round_up(K, 16) bytes, which every backend reads in
  // place, then the scales, then the zero points, each 16-byte aligned. Static: one scale (and zero
  // point) for every row, which starts as a copy of the given one unless one block writes it.
  const bool is_static = input_scale.has_value();
  const int64_t q_stride = round_up<int64_t>(k, 16);
  ScaleTensor st = quantize_scales(granularity, nullptr, m, k);  // static is per tensor: one scale
  const int64_t scales = st.numel();
  const int64_t scale_at = round_up<int64_t>(m * q_stride, 16);
  const int64_t zero_at = round_up<int64_t>(scale_at + 4 * scales, 16);
  const at::Tensor scratch = at::empty({zero_at + (asymmetric ? 4 * scales : 0)}, x.options().dtype(at::kByte));
  uint8_t* base = scratch.data_ptr<uint8_t>();
  QuantizeTargets t;
  t.q = reinterpret_cast<int8_t*>(base);
  t.q_stride_row = q_stride;
  t.scale_out = reinterpret_cast<float*>(base + scale_at);
  t.zero_out = asymmetric ? reinterpret_cast<int32_t*>(base + zero_at) : nullptr;
  t.by_kernel = static_by_one_block(x_rows, *rows, granularity, is_static);
  if (is_static && !t.by_kernel) {
    copy_one_element(*input_scale, t.scale_out, x);
    if (asymmetric) copy_one_element(*input_zero_point, t.zero_out, x);
  }
  quantize_to(x_rows, *rows, *dtype, granularity, input_scale, smooth.value_or(at::Tensor()), call.overlap, asym, t);

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
  return scaled_gemm_impl(kOp, requested, scratch, weight, e, bias_f32, x.scalar_type(), call);
}

TORCH_LIBRARY_IMPL(tcgemm, CPU, m) { m.impl("quant_linear", &quant_linear); }
TORCH_LIBRARY_IMPL(tcgemm, CUDA, m) { m.impl("quant_linear", &quant_linear); }

}  // namespace tcgemm

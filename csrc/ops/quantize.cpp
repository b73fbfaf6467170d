// tcgemm::quantize: validation, layout preparation, output allocation, launch.
// Below this layer everything is QuantizeParams (common/quantize_params.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/quantize_params.h"
#include "kernels/cpu/cpu_quantize.h"
#include "kernels/quantize/quantize.h"
#include "ops/tensor_args.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.quantize";

QuantGranularity parse_granularity(std::string_view g) {
  if (g == "tensor") return QuantGranularity::kTensor;
  if (g == "token") return QuantGranularity::kToken;
  TORCH_CHECK_VALUE(g == "group", kOp, ": argument 'granularity' must be one of 'tensor', 'token', 'group'; got '",
                    std::string(g), "'");
  return QuantGranularity::kGroup;
}

const char* granularity_name(QuantGranularity g) {
  switch (g) {
    case QuantGranularity::kTensor:
      return "tensor";
    case QuantGranularity::kToken:
      return "token";
    case QuantGranularity::kGroup:
      return "group";
  }
  return "?";
}

QuantDtype check_x(const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.dim() == 2, kOp, ": argument 'x' must be a 2-D tensor [M, K], got a ", num(x.dim()),
                    "-D tensor");
  switch (x.scalar_type()) {
    case at::kBFloat16:
      return QuantDtype::kBFloat16;
    case at::kHalf:
      return QuantDtype::kFloat16;
    case at::kFloat:
      return QuantDtype::kFloat32;
    default:
      TORCH_CHECK_TYPE(false, kOp, ": argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, got ",
                       dtype_name(x.scalar_type()));
  }
  return QuantDtype::kFloat32;
}

// Shape of the scales: [] per tensor, [M, 1] per token, [M, G] per group.
std::vector<int64_t> scale_shape(QuantGranularity g, int64_t m, int64_t k) {
  if (g == QuantGranularity::kTensor) return {};
  if (g == QuantGranularity::kToken) return {m, 1};
  return {m, scale_blocks(k)};
}

void check_scale(const at::Tensor& s, const at::Tensor& x, QuantGranularity g) {
  TORCH_CHECK_TYPE(s.scalar_type() == at::kFloat, kOp, ": argument 'scale' must have dtype torch.float32, got ",
                   dtype_name(s.scalar_type()));
  TORCH_CHECK_VALUE(s.device() == x.device(), kOp, ": argument 'scale' must be on the same device as 'x' (",
                    x.device().str(), "), got ", s.device().str());
  if (g == QuantGranularity::kTensor) {
    TORCH_CHECK_VALUE(s.numel() == 1 && s.dim() <= 2, kOp,
                      ": argument 'scale' must have one element (shape [], [1] or [1, 1]) for granularity 'tensor', "
                      "got shape ",
                      shape_str(s.sizes()));
    return;
  }
  const std::vector<int64_t> expected = scale_shape(g, x.size(0), x.size(1));
  TORCH_CHECK_VALUE(s.sizes() == at::IntArrayRef(expected), kOp, ": argument 'scale' must have shape ",
                    g == QuantGranularity::kToken ? "[M, 1] = " : "[M, ceil(K / 128)] = ", shape_str(expected),
                    " for granularity '", granularity_name(g), "', got ", shape_str(s.sizes()));
}

void run_cpu(const at::Tensor& x, QuantizeParams& p) {
  // The CPU kernel reads fp32 rows with unit stride along K; bf16/fp16 -> fp32 is exact.
  const bool direct = x.scalar_type() == at::kFloat && (x.stride(1) == 1 || p.k == 1);
  const at::Tensor xf = direct ? x : x.to(at::kFloat).contiguous();
  p.x = xf.const_data_ptr<float>();
  p.x_stride_row = xf.stride(0);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / p.k);
  float tensor_scale = 1.f;
  if (p.granularity == QuantGranularity::kTensor && p.scale_in == nullptr) {
    // max is exact and order-free, so splitting the rows cannot change the result.
    const float amax = at::parallel_reduce(
        0, p.m, grain, 0.f, [&](int64_t b, int64_t e, float acc) { return std::fmax(acc, cpu::quantize_amax_rows(p, b, e)); },
        [](float a, float b) { return std::fmax(a, b); });
    tensor_scale = quant_scale_from_amax(amax);
    *p.scale_out = tensor_scale;
  }
  at::parallel_for(0, p.m, grain, [&](int64_t b, int64_t e) { cpu::quantize_rows(p, b, e, tensor_scale); });
}

void run_cuda(const at::Tensor& x, QuantizeParams& p) {
  const c10::cuda::CUDAGuard guard(x.device());
  // The kernels need unit stride along K; any row stride is read in place.
  const at::Tensor xk = (x.stride(1) == 1 || p.k == 1) ? x : x.contiguous();
  p.x = xk.const_data_ptr();
  p.x_stride_row = xk.stride(0);
  // Per-tensor dynamic: 4 bytes for the grid-wide amax (zeroed by the launcher on the stream).
  // It and xk stay alive, and their memory with the caching allocator, until the launches are enqueued.
  at::Tensor workspace;
  if (p.granularity == QuantGranularity::kTensor && p.scale_in == nullptr) {
    workspace = at::empty({1}, x.options().dtype(at::kFloat));
    p.workspace = workspace.data_ptr();
  }
  p.stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  launch_quantize(p);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> quantize(const at::Tensor& x, std::string_view granularity_arg,
                                            const std::optional<at::Tensor>& scale) {
  const QuantDtype dtype = check_x(x);
  const QuantGranularity granularity = parse_granularity(granularity_arg);
  if (scale.has_value()) check_scale(*scale, x, granularity);
  const int64_t m = x.size(0), k = x.size(1);

  at::Tensor q = at::empty({m, k}, x.options().dtype(at::kChar));
  // Static: the op returns a copy of the given scales because, under this schema, an output may
  // not alias an input (opcheck, functionalization and torch.compile rely on it); the Python
  // wrapper hands the caller's own tensor back instead.
  at::Tensor scale_out =
      scale.has_value() ? scale->clone() : at::empty(scale_shape(granularity, m, k), x.options().dtype(at::kFloat));
  if (m == 0 || k == 0) {
    if (!scale.has_value()) scale_out.fill_(1.f);  // amax of nothing is 0, whose scale is 1
    return {q, scale_out};
  }
  // The kernels index the given scales densely.
  const at::Tensor scale_in = scale.has_value() ? scale->contiguous() : at::Tensor();

  QuantizeParams p;
  p.m = m;
  p.k = k;
  p.dtype = dtype;
  p.granularity = granularity;
  p.q = q.data_ptr<int8_t>();
  if (scale.has_value()) {
    p.scale_in = scale_in.const_data_ptr<float>();
  } else {
    p.scale_out = scale_out.data_ptr<float>();
  }
  if (x.is_cuda()) {
    run_cuda(x, p);
  } else {
    TORCH_CHECK_VALUE(x.is_cpu(), kOp, ": argument 'x' must be a CPU or CUDA tensor, got ", x.device().str());
    run_cpu(x, p);
  }
  return {q, scale_out};
}

TORCH_LIBRARY_IMPL(tcgemm, CPU, m) { m.impl("quantize", &quantize); }

TORCH_LIBRARY_IMPL(tcgemm, CUDA, m) { m.impl("quantize", &quantize); }

}  // namespace tcgemm

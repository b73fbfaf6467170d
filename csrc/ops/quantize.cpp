// tcgemm::quantize: validation, layout preparation, output allocation, launch.
// Below this layer everything is QuantizeParams (common/quantize_params.h).
#include "kernels/quantize/quantize.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/quantize_params.h"
#include "kernels/cpu/cpu_quantize.h"
#include "ops/cpu_parallel.h"
#include "ops/ops.h"
#include "ops/tensor_args.h"
#include "ops/torch_api.h"

namespace tcgemm {
namespace {

constexpr const char* kOp = "tcgemm.quantize";
constexpr const char* kOpAsym = "tcgemm.quantize_asym";

QuantGranularity parse_granularity(std::string_view g) {
  if (g == "tensor") return QuantGranularity::kTensor;
  if (g == "token") return QuantGranularity::kToken;
  TCGEMM_CHECK_VALUE(g == "group", kOp, ": argument 'granularity' must be one of 'tensor', 'token', 'group'; got '",
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

QuantDtype check_x(const char* op, const Tensor& x) {
  TCGEMM_CHECK_VALUE(x.dim() == 2, op, ": argument 'x' must be a 2-D tensor [M, K], got a ", num(x.dim()), "-D tensor");
  const std::optional<QuantDtype> dtype = quant_dtype_of(dtype_of(x));
  TCGEMM_CHECK_TYPE(dtype.has_value(), op,
                    ": argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, got ",
                    dtype_name(dtype_of(x)));
  return *dtype;
}

// Shape of the scales (common/scale_layout.h: quantize_scales).
Sizes scale_shape(QuantGranularity g, int64_t m, int64_t k) {
  const ScaleTensor s = quantize_scales(g, nullptr, m, k);
  return Sizes(s.sizes, s.sizes + s.dim);
}

// A given scale (fp32) or zero point (int32, `name`) of x quantized with granularity g.
void check_scale(const char* op, const Tensor& s, const char* name, ScalarType dtype, const Tensor& x,
                 QuantGranularity g) {
  TCGEMM_CHECK_TYPE(dtype_of(s) == dtype, op, ": argument '", name, "' must have dtype ", dtype_name(dtype), ", got ",
                    dtype_name(dtype_of(s)));
  TCGEMM_CHECK_VALUE(same_device(s, x), op, ": argument '", name, "' must be on the same device as 'x' (",
                     device_str(x), "), got ", device_str(s));
  if (g == QuantGranularity::kTensor) {
    TCGEMM_CHECK_VALUE(s.numel() == 1 && s.dim() <= 2, op, ": argument '", name,
                       "' must have one element (shape [], [1] or [1, 1]) for granularity 'tensor', got shape ",
                       shape_str(s));
    return;
  }
  const Sizes expected = scale_shape(g, x.size(0), x.size(1));
  TCGEMM_CHECK_VALUE(sizes_equal(s, expected), op, ": argument '", name, "' must have shape ",
                     g == QuantGranularity::kToken ? "[M, 1] = " : "[M, ceil(K / 128)] = ", shape_str(expected),
                     " for granularity '", granularity_name(g), "', got ", shape_str(s));
}

void run_cpu(QuantizeParams& p) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / p.k);  // rows per chunk
  float tensor_scale = 1.f;
  if (p.granularity == QuantGranularity::kTensor && p.scale_in == nullptr) {
    // max is exact and order-free (a NaN stays NaN), so splitting the rows cannot change the result.
    std::mutex fold;
    float all = 0.f;
    cpu_parallel_for(p.m, grain, [&](int64_t b, int64_t e) {
      const float a = cpu::quantize_amax_rows(p, b, e);
      const std::lock_guard<std::mutex> lock(fold);
      all = (all != all || a != a) ? std::numeric_limits<float>::quiet_NaN() : std::fmax(all, a);
    });
    tensor_scale = quant_scale_from_amax(all);
    *p.scale_out = tensor_scale;
  }
  std::atomic<bool> tensor_bad{false};
  cpu_parallel_for(p.m, grain, [&](int64_t b, int64_t e) {
    if (cpu::quantize_rows(p, b, e, tensor_scale)) tensor_bad.store(true);
  });
  if (tensor_bad.load()) *p.scale_out = std::numeric_limits<float>::quiet_NaN();
}

void run_cuda(QuantizeParams& p, const Tensor& x, bool overlap) {
  const CudaDeviceScope scope(x.get_device_index());
  p.pdl = overlap && has_pdl(device_info(x));
  // Per-tensor dynamic: 4 bytes for the grid-wide amax (zeroed by the launcher on the stream).
  // It stays alive, and its memory with the caching allocator, until the launches are enqueued.
  std::optional<Tensor> workspace;
  if (p.granularity == QuantGranularity::kTensor && p.scale_in == nullptr) {
    workspace = empty({1}, ScalarType::Float, x);
    p.workspace = workspace->data_ptr();
  }
  p.stream = current_cuda_stream(x.get_device_index());
  launch_quantize(p);
}

}  // namespace

std::optional<QuantDtype> quant_dtype_of(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16:
      return QuantDtype::kBFloat16;
    case ScalarType::Half:
      return QuantDtype::kFloat16;
    case ScalarType::Float:
      return QuantDtype::kFloat32;
    default:
      return std::nullopt;
  }
}

// Every value of a static argument passes `valid`, else an error naming the argument, what it
// must hold and its first bad value. Checked where that needs no device synchronisation (CPU
// tensors); on a GPU a bad value marks its group NaN (common/quantize_params.h).
template <class T, class Valid, class Show>
void check_static_values(const char* op, const char* name, const Tensor& t, Valid valid, const char* must_hold,
                         Show show) {
  const Tensor dense = as_contiguous(t);
  const T* v = const_data<T>(dense);
  for (int64_t i = 0; i < dense.numel(); ++i) {
    TCGEMM_CHECK_VALUE(valid(v[i]), op, ": argument '", name, "' must hold ", must_hold, ", got ", show(v[i]),
                       " at flat index ", num(i));
  }
}

void check_static_scale_values(const char* op, const char* name, const Tensor& s) {
  check_static_values<float>(op, name, s, quant_scale_valid, "positive finite numbers",
                             [](float v) { return num_float(v); });
}

void check_static_zero_point_values(const char* op, const char* name, const Tensor& z) {
  check_static_values<int32_t>(op, name, z, quant_zero_valid, "values in [-128, 127]",
                               [](int32_t v) { return num(v); });
}

void check_smooth(const char* op, const Tensor& s, const Tensor& x) {
  TCGEMM_CHECK_TYPE(dtype_of(s) == ScalarType::Float, op, ": argument 'smooth' must have dtype torch.float32, got ",
                    dtype_name(dtype_of(s)));
  TCGEMM_CHECK_VALUE(s.dim() == 1 && s.size(0) == x.size(x.dim() - 1), op,
                     ": argument 'smooth' must have shape [K] = [", num(x.size(x.dim() - 1)), "], got ", shape_str(s));
  TCGEMM_CHECK_VALUE(same_device(s, x), op, ": argument 'smooth' must be on the same device as 'x' (", device_str(x),
                     "), got ", device_str(s));
}

std::optional<Rows> rows_of(const Tensor& x) {
  const int64_t d = x.dim();
  Rows r;
  r.m = 1;
  r.k = x.size(d - 1);
  r.stride_col = x.stride(d - 1);
  r.stride_row = r.k;  // a single row is never stepped over
  // The leading dimensions (size-1 ones aside) collapse into one when each one's stride is the
  // stride of the rows inside it times their number.
  for (int64_t i = d - 2; i >= 0; --i) {
    const int64_t size = x.size(i);
    if (size == 1) continue;
    if (r.m == 1) {
      r.stride_row = x.stride(i);
    } else if (x.stride(i) != r.stride_row * r.m) {
      return std::nullopt;
    }
    r.m *= size;
  }
  return r;
}

bool static_by_one_block(const Tensor& x, const Rows& r, QuantGranularity granularity, bool is_static) {
  // A few long rows on the GPU with one static scale (a decode step): one block, which writes the
  // returned scale itself. Its threads sweep one row at a time, so short or many rows keep the grid.
  return is_static && is_cuda(x) && granularity == QuantGranularity::kTensor && r.m > 0 && r.m <= kStaticOneBlockRows &&
         r.k >= kStaticOneBlockMinK && r.m * r.k <= kStaticOneBlockElems;
}

QuantizeParams quantize_params(const Tensor& x, const Rows& r, QuantDtype dtype, QuantGranularity granularity) {
  QuantizeParams p;
  // x is read in place with any strides (a zero stride included: an expand-ed x is never
  // materialised); the GPU kernels take 16-byte vectors only where its K stride is 1.
  p.x = x.data_ptr();
  p.x_stride_row = r.stride_row;
  p.x_stride_col = r.stride_col;
  p.m = r.m;
  p.k = r.k;
  p.dtype = dtype;
  p.granularity = granularity;
  return p;
}

void check_rotate(const char* op, const Tensor& x, QuantGranularity granularity, bool is_static, bool smooth,
                  bool asymmetric) {
  TCGEMM_CHECK_VALUE(!is_static && !smooth && !asymmetric, op,
                     ": rotate=True needs dynamic symmetric scales and no 'smooth'");
  TCGEMM_CHECK_VALUE(granularity != QuantGranularity::kTensor, op,
                     ": rotate=True needs granularity 'token' or 'group', got 'tensor'");
  const int64_t k = x.size(x.dim() - 1);
  TCGEMM_CHECK_VALUE(k % kScaleBlock == 0, op, ": rotate=True needs K a multiple of ", num(kScaleBlock),
                     " (one Hadamard block), got 'x' of shape ", shape_str(x));
}

void quantize_to(const Tensor& x_arg, const Rows& r_arg, QuantDtype dtype, QuantGranularity granularity,
                 const std::optional<Tensor>& scale, const Tensor* smooth, bool overlap, const AsymmetricArgs& asym,
                 const QuantizeTargets& t, bool rotate) {
  if (r_arg.m == 0 || r_arg.k == 0) return;
  // Rotated rows on the GPU are read as 16-byte vectors (the lanes of a block exchange values):
  // any other layout of x is copied first.
  std::optional<Tensor> x_copy;
  std::optional<Rows> r_copy;
  if (rotate && is_cuda(x_arg) && !quantize_params(x_arg, r_arg, dtype, granularity).x_as_vectors()) {
    x_copy = contiguous_clone(x_arg);
    r_copy = rows_of(*x_copy);
  }
  const Tensor& x = x_copy ? *x_copy : x_arg;
  const Rows& r = r_copy ? *r_copy : r_arg;
  // The kernels index the given scales densely; they read these and write the targets.
  std::optional<Tensor> scale_copy, smooth_copy, zero_copy;
  const Tensor* scale_in = scale.has_value() ? &dense(*scale, scale_copy) : nullptr;
  const Tensor* channel_mul = smooth != nullptr ? &dense(*smooth, smooth_copy) : nullptr;
  const Tensor* zero_in = asym.enabled && asym.zero_point.has_value() ? &dense(*asym.zero_point, zero_copy) : nullptr;

  QuantizeParams p = quantize_params(x, r, dtype, granularity);
  p.rotate = rotate;
  p.q = t.q;
  p.q_stride_row = t.q_stride_row;
  p.scale_out = t.scale_out;
  p.scale_out_by_kernel = t.by_kernel;
  p.w4_rowsum = t.w4_rowsum;
  TCGEMM_CHECK_INTERNAL(t.w4_rowsum == nullptr || is_cuda(x), "tcgemm: the W4 K order is written on the GPU only");
  if (scale_in) p.scale_in = const_data<float>(*scale_in);
  if (channel_mul) p.channel_mul = const_data<float>(*channel_mul);
  if (asym.enabled) {
    p.asymmetric = true;
    p.zero_out = t.zero_out;
    if (zero_in) p.zero_in = const_data<int32_t>(*zero_in);
  }
  if (is_cuda(x)) {
    run_cuda(p, x, overlap);
  } else {
    run_cpu(p);
  }
}

namespace {

struct QuantizeResult {
  Tensor q, scale;
  std::optional<Tensor> zero_point;  // asymmetric only
};

// tcgemm.quantize / quantize_asym on the validated rows `r` of x, into new tensors; `smooth`
// (validated) or null.
QuantizeResult quantize_impl(const Tensor& x, const Rows& r, QuantDtype dtype, QuantGranularity granularity,
                             const std::optional<Tensor>& scale, const Tensor* smooth, bool overlap,
                             const AsymmetricArgs& asym = {}, bool rotate = false) {
  const int64_t m = r.m, k = r.k;
  Tensor q = empty({m, k}, ScalarType::Char, x);
  // Static: the op returns a copy of the given scales (an output may not alias an input under
  // this schema: opcheck, functionalization and torch.compile rely on it), contiguous, with NaN
  // for the groups that held a non-finite x or had an invalid scale.
  const bool by_kernel = static_by_one_block(x, r, granularity, scale.has_value());
  const Sizes shape = scale.has_value() ? sizes_of(*scale) : scale_shape(granularity, m, k);
  Tensor scale_out = scale.has_value() && !by_kernel ? contiguous_clone(*scale) : empty(shape, ScalarType::Float, x);
  std::optional<Tensor> zero_out;  // asymmetric only
  if (asym.enabled) {
    if (!asym.zero_point.has_value()) {
      zero_out = empty(shape, ScalarType::Int, x);
    } else {
      zero_out = by_kernel ? empty(sizes_of(*asym.zero_point), ScalarType::Int, x) : contiguous_clone(*asym.zero_point);
    }
  }
  if (m == 0 || k == 0) {
    if (!scale.has_value()) {
      fill(scale_out, 1.0);                   // the range of nothing is 0, whose scale is 1
      if (zero_out) fill(*zero_out, -128.0);  // quant_asym_zero(0, 1)
    }
    return {std::move(q), std::move(scale_out), std::move(zero_out)};
  }
  QuantizeTargets t;
  t.q = data<int8_t>(q);
  t.q_stride_row = k;
  t.scale_out = data<float>(scale_out);
  t.zero_out = zero_out ? data<int32_t>(*zero_out) : nullptr;
  t.by_kernel = by_kernel;
  quantize_to(x, r, dtype, granularity, scale, smooth, overlap, asym, t, rotate);
  return {std::move(q), std::move(scale_out), std::move(zero_out)};
}

}  // namespace

std::tuple<Tensor, Tensor> quantize(const Tensor& x, std::string_view granularity_arg,
                                    const std::optional<Tensor>& scale, const std::optional<Tensor>& smooth,
                                    bool rotate) {
  const QuantDtype dtype = check_x(kOp, x);
  const QuantGranularity granularity = parse_granularity(granularity_arg);
  if (scale.has_value()) check_scale(kOp, *scale, "scale", ScalarType::Float, x, granularity);
  if (smooth.has_value()) check_smooth(kOp, *smooth, x);
  if (rotate) check_rotate(kOp, x, granularity, scale.has_value(), smooth.has_value(), false);
  TCGEMM_CHECK_VALUE(is_cpu(x) || is_cuda(x), kOp, ": argument 'x' must be a CPU or CUDA tensor, got ", device_str(x));
  if (scale.has_value() && is_cpu(x)) check_static_scale_values(kOp, "scale", *scale);
  QuantizeResult r = quantize_impl(x, *rows_of(x), dtype, granularity, scale, smooth.has_value() ? &*smooth : nullptr,
                                   /*overlap=*/false, AsymmetricArgs{}, rotate);
  return {std::move(r.q), std::move(r.scale)};
}

// Asymmetric: dynamic per token, or static ("token" or "tensor") with both scale and zero_point.
std::tuple<Tensor, Tensor, Tensor> quantize_asym(const Tensor& x, std::string_view granularity_arg,
                                                 const std::optional<Tensor>& scale,
                                                 const std::optional<Tensor>& zero_point,
                                                 const std::optional<Tensor>& smooth) {
  const QuantDtype dtype = check_x(kOpAsym, x);
  TCGEMM_CHECK_VALUE(granularity_arg == "token" || granularity_arg == "tensor", kOpAsym,
                     ": argument 'granularity' must be 'token' or 'tensor'; got '", std::string(granularity_arg), "'");
  const QuantGranularity granularity = parse_granularity(granularity_arg);
  TCGEMM_CHECK_VALUE(scale.has_value() == zero_point.has_value(), kOpAsym,
                     ": arguments 'scale' and 'zero_point' must be given together (static) or both be None (dynamic)");
  TCGEMM_CHECK_VALUE(scale.has_value() || granularity == QuantGranularity::kToken, kOpAsym,
                     ": granularity 'tensor' needs a static 'scale' and 'zero_point' (dynamic asymmetric "
                     "quantization is per token)");
  if (scale.has_value()) {
    check_scale(kOpAsym, *scale, "scale", ScalarType::Float, x, granularity);
    check_scale(kOpAsym, *zero_point, "zero_point", ScalarType::Int, x, granularity);
  }
  if (smooth.has_value()) check_smooth(kOpAsym, *smooth, x);
  TCGEMM_CHECK_VALUE(is_cpu(x) || is_cuda(x), kOpAsym, ": argument 'x' must be a CPU or CUDA tensor, got ",
                     device_str(x));
  if (scale.has_value() && is_cpu(x)) {
    check_static_scale_values(kOpAsym, "scale", *scale);
    check_static_zero_point_values(kOpAsym, "zero_point", *zero_point);
  }
  QuantizeResult r = quantize_impl(x, *rows_of(x), dtype, granularity, scale, smooth.has_value() ? &*smooth : nullptr,
                                   /*overlap=*/false, AsymmetricArgs{true, zero_point});
  return {std::move(r.q), std::move(r.scale), std::move(*r.zero_point)};
}

namespace {

// The registered kernels, in the types the stable ABI unboxes to.
std::tuple<Tensor, Tensor> quantize_kernel(const Tensor& x, const std::string& granularity,
                                           const std::optional<Tensor>& scale, const std::optional<Tensor>& smooth,
                                           bool rotate) {
  return quantize(x, granularity, scale, smooth, rotate);
}

std::tuple<Tensor, Tensor, Tensor> quantize_asym_kernel(const Tensor& x, const std::string& granularity,
                                                        const std::optional<Tensor>& scale,
                                                        const std::optional<Tensor>& zero_point,
                                                        const std::optional<Tensor>& smooth) {
  return quantize_asym(x, granularity, scale, zero_point, smooth);
}

void register_kernels(Library& m) {
  m.impl("quantize", TCGEMM_BOX(quantize_kernel));
  m.impl("quantize_asym", TCGEMM_BOX(quantize_asym_kernel));
}

}  // namespace

TCGEMM_IMPL_CPU_AND_CUDA(register_kernels)

}  // namespace tcgemm

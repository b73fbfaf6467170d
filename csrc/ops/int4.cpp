// Packed 4-bit weights at the binding layer (common/int4.h has the format): their checks, the
// unpacking into int8 that backends without a 4-bit main loop compute with, and the ops
// tcgemm.unpack_int4 and tcgemm.gemm_int4 (the exact int32 GEMM against a packed weight, which
// every backend must compute bit for bit as the int8 GEMM of the unpacked weight).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <string_view>

#include "common/int4.h"
#include "common/math.h"
#include "common/scale_layout.h"
#include "dispatch/backends.h"
#include "dispatch/launch.h"
#include "kernels/int4/unpack_int4.h"
#include "ops/cpu_parallel.h"
#include "ops/ops.h"
#include "ops/tensor_args.h"

namespace tcgemm {

void check_packed_weight(const char* op, const at::Tensor& w, const char* name, int64_t k, const char* k_from) {
  TORCH_CHECK_VALUE(w.dim() == 2, op, ": argument '", name, "' (4-bit) must be a 2-D tensor [N, K/2], got a ",
                    num(w.dim()), "-D tensor");
  TORCH_CHECK_TYPE(w.scalar_type() == at::kByte, op, ": argument '", name,
                   "' (4-bit) must have dtype torch.uint8 (two 4-bit values per byte), got ",
                   dtype_name(w.scalar_type()));
  TORCH_CHECK_VALUE(k % kInt4PerByte == 0, op, ": a 4-bit '", name, "' packs two values per byte along K, so K (",
                    k_from, ") must be even, got K = ", num(k));
  TORCH_CHECK_VALUE(w.size(1) == k / kInt4PerByte, op, ": argument '", name, "' (4-bit) must have shape [N, K/2] = [",
                    num(w.size(0)), ", ", num(k / kInt4PerByte), "] for K = ", num(k), " (", k_from, "), got ",
                    shape_str(w.sizes()));
  TORCH_CHECK_VALUE(w.stride(1) == 1 || w.size(1) <= 1, op, ": argument '", name,
                    "' (4-bit) must be contiguous along K (stride 1 in its last dimension), got strides ",
                    shape_str(w.strides()));
  TORCH_CHECK_VALUE(w.size(0) < (int64_t{1} << 30) && k < (int64_t{1} << 30), op, ": argument '", name,
                    "' has a dimension >= 2^30, which is not supported");
}

void check_group_scale(const char* op, const at::Tensor& s, const char* name, int64_t n, int64_t k,
                       const at::Tensor& ref, const char* ref_name) {
  TORCH_CHECK_TYPE(s.scalar_type() == at::kChar, op, ": argument '", name, "' must have dtype torch.int8, got ",
                   dtype_name(s.scalar_type()));
  check_same_device(op, s, name, ref, ref_name);
  const int64_t kb = scale_blocks(k);
  TORCH_CHECK_VALUE(s.dim() == 2 && s.size(0) == n && s.size(1) == kb, op, ": argument '", name,
                    "' must have shape [N, ceil(K/128)] = [", num(n), ", ", num(kb), "], got ", shape_str(s.sizes()));
  if (s.is_cpu() && s.numel() > 0) {  // a GPU tensor would need a synchronisation to read
    const auto [lo, hi] = at::aminmax(s);
    const int64_t low = lo.item<int64_t>(), high = hi.item<int64_t>();
    TORCH_CHECK_VALUE(low >= kInt4GroupScaleMin && high <= kInt4GroupScaleMax, op, ": argument '", name,
                      "' must hold values in [", num(kInt4GroupScaleMin), ", ", num(kInt4GroupScaleMax),
                      "] (every 4-bit value times its group scale must fit in int8), got values in [", num(low), ", ",
                      num(high), "]");
  }
}

at::Tensor unpack_int4_to_int8(const at::Tensor& packed, const at::Tensor* group_scale, int64_t k) {
  const int64_t n = packed.size(0);
  // Rows padded to 16 bytes: the layout every GPU backend reads in place.
  at::Tensor buf = at::empty({n, round_up<int64_t>(std::max<int64_t>(k, 1), 16)}, packed.options().dtype(at::kChar));
  at::Tensor out = buf.narrow(1, 0, k);
  if (n == 0 || k == 0) return out;
  const at::Tensor gs = group_scale != nullptr ? group_scale->contiguous() : at::Tensor();
  UnpackInt4Params p;
  p.packed = packed.const_data_ptr<uint8_t>();
  p.packed_stride = packed.size(0) == 1 ? k / kInt4PerByte : packed.stride(0);
  p.group_scale = gs.defined() ? gs.const_data_ptr<int8_t>() : nullptr;
  p.group_scale_stride = gs.defined() ? gs.size(1) : 0;
  p.out = out.data_ptr<int8_t>();
  p.out_stride = buf.size(1);
  p.n = n;
  p.k = k;
  if (packed.is_cuda()) {
    const c10::cuda::CUDAGuard guard(packed.device());
    p.stream = at::cuda::getCurrentCUDAStream(packed.device().index()).stream();
    launch_unpack_int4(p);
  } else {
    cpu_parallel_for(n, std::max<int64_t>(1, (int64_t{1} << 16) / k),
                     [&](int64_t begin, int64_t end) { unpack_int4_rows(p, begin, end); });
  }
  return out;
}

namespace {

constexpr const char* kUnpackOp = "tcgemm.unpack_int4";
constexpr const char* kGemmOp = "tcgemm.gemm_int4";

at::Tensor unpack_int4(const at::Tensor& packed, const std::optional<at::Tensor>& group_scale) {
  const int64_t k = packed.dim() == 2 ? packed.size(1) * kInt4PerByte : 0;
  check_packed_weight(kUnpackOp, packed, "packed", k, "twice the bytes of a row");
  TORCH_CHECK_VALUE(packed.is_cpu() || packed.is_cuda(), kUnpackOp,
                    ": argument 'packed' must be a CPU or CUDA tensor, got ", packed.device().str());
  if (group_scale.has_value())
    check_group_scale(kUnpackOp, *group_scale, "group_scale", packed.size(0), k, packed, "packed");
  return unpack_int4_to_int8(packed, group_scale.has_value() ? &*group_scale : nullptr, k).contiguous();
}

at::Tensor gemm_int4(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& group_scale,
                     std::string_view backend_arg) {
  const Backend requested = parse_backend_arg(kGemmOp, backend_arg);
  check_operand(kGemmOp, a, "a", "[M, K]", /*signed_only=*/true);
  check_same_device(kGemmOp, b, "b", a);
  const int64_t m = a.size(0), k = a.size(1);
  check_packed_weight(kGemmOp, b, "b", k, "the columns of 'a'");
  const int64_t n = b.size(0);
  const at::Tensor* gs = group_scale.has_value() ? &*group_scale : nullptr;
  if (gs != nullptr) check_group_scale(kGemmOp, *gs, "group_scale", n, k, a, "a");
  TORCH_CHECK_VALUE(k <= kMaxUnblockedK, kGemmOp, ": K = ", num(k), " > ", num(kMaxUnblockedK),
                    " could overflow the int32 accumulator");
  at::Tensor out = at::empty({m, n}, a.options().dtype(at::kInt));
  if (m == 0 || n == 0) return out;
  if (k == 0) return out.zero_();
  if (a.is_cpu()) {
    check_cpu_backend(kGemmOp, requested);
    return gemm(a, unpack_int4_to_int8(b, gs, k).t(), std::nullopt, 1, 0, "cpu");
  }
  TORCH_CHECK_VALUE(a.is_cuda(), kGemmOp, ": argument 'a' must be a CPU or CUDA tensor, got ", a.device().str());
  const c10::cuda::CUDAGuard guard(a.device());
  const DeviceInfo dev = device_info(a.device());
  Int32EpilogueParams e;
  Backend backend = Backend::kAuto;
  const std::string why_not = resolve_gpu_backend(requested, dev, e, &backend);
  TORCH_CHECK_VALUE(why_not.empty(), kGemmOp, ": ", why_not, " (argument 'backend')");
  GemmProblem p = gemm_problem(a, b, out.data_ptr<int32_t>(), n, OutType::kInt32, /*b_rows=*/true);
  p.k = static_cast<int>(k);
  p.b_int4 = true;
  p.b.is_signed = true;  // the 4-bit values are two's complement (the bytes are uint8)
  const at::Tensor gs_c = gs != nullptr ? gs->contiguous() : at::Tensor();
  p.b_group_scale = gs_c.defined() ? gs_c.const_data_ptr<int8_t>() : nullptr;
  p.b_group_scale_stride = gs_c.defined() ? gs_c.size(1) : 0;
  if (!reads_packed_b(backend, p, dev, /*per_block=*/false)) {  // the int8 GEMM of the unpacked weight
    return gemm(a, unpack_int4_to_int8(b, gs, k).t(), std::nullopt, 1, 0, backend_arg);
  }
  at::Tensor a_copy;  // the skinny kernel reads A K-major, 16-byte aligned
  if (!operand_fits(backend, p.a, p.m, p.k)) {
    a_copy = k_major_copy(a, false);
    p.a = describe(a_copy, false);
  }
  p.stream = at::cuda::getCurrentCUDAStream(a.device().index()).stream();
  run_gpu(backend, p, e, dev);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(tcgemm, CPU, m) {
  m.impl("unpack_int4", &unpack_int4);
  m.impl("gemm_int4", &gemm_int4);
}
TORCH_LIBRARY_IMPL(tcgemm, CUDA, m) {
  m.impl("unpack_int4", &unpack_int4);
  m.impl("gemm_int4", &gemm_int4);
}

}  // namespace tcgemm

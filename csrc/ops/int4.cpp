// Packed 4-bit weights at the binding layer (common/int4.h has the format): their checks, the
// unpacking into int8 that backends without a 4-bit main loop compute with, and the ops
// tcgemm.unpack_int4 and tcgemm.gemm_int4 (the exact int32 GEMM against a packed weight, which
// every backend must compute bit for bit as the int8 GEMM of the unpacked weight).
#include "common/int4.h"

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/math.h"
#include "common/scale_layout.h"
#include "dispatch/backends.h"
#include "dispatch/launch.h"
#include "kernels/int4/unpack_int4.h"
#include "kernels/sm90/sm90_unpack_ahead.h"
#include "kernels/sm90/sm90_w4.h"
#include "ops/cpu_parallel.h"
#include "ops/ops.h"
#include "ops/tensor_args.h"
#include "ops/torch_api.h"

namespace tcgemm {

void check_packed_weight(const char* op, const Tensor& w, const char* name, int64_t k, const char* k_from) {
  TCGEMM_CHECK_VALUE(w.dim() == 2, op, ": argument '", name, "' (4-bit) must be a 2-D tensor [N, K/2], got a ",
                     num(w.dim()), "-D tensor");
  TCGEMM_CHECK_TYPE(dtype_of(w) == ScalarType::Byte, op, ": argument '", name,
                    "' (4-bit) must have dtype torch.uint8 (two 4-bit values per byte), got ", dtype_name(dtype_of(w)));
  TCGEMM_CHECK_VALUE(k % kInt4PerByte == 0, op, ": a 4-bit '", name, "' packs two values per byte along K, so K (",
                     k_from, ") must be even, got K = ", num(k));
  TCGEMM_CHECK_VALUE(w.size(1) == k / kInt4PerByte, op, ": argument '", name, "' (4-bit) must have shape [N, K/2] = [",
                     num(w.size(0)), ", ", num(k / kInt4PerByte), "] for K = ", num(k), " (", k_from, "), got ",
                     shape_str(w));
  TCGEMM_CHECK_VALUE(w.stride(1) == 1 || w.size(1) <= 1, op, ": argument '", name,
                     "' (4-bit) must be contiguous along K (stride 1 in its last dimension), got strides ",
                     strides_str(w));
  TCGEMM_CHECK_VALUE(w.size(0) < (int64_t{1} << 30) && k < (int64_t{1} << 30), op, ": argument '", name,
                     "' has a dimension >= 2^30, which is not supported");
}

namespace {

// An int8 table `name` of one value per 1x128 group of a weight [N, K]: [N, ceil(K/128)] on the
// device of `ref`; on the CPU also its values, in [low, high] (`why` says what for).
void check_group_table(const char* op, const Tensor& s, const char* name, int64_t n, int64_t k, const Tensor& ref,
                       const char* ref_name, int low, int high, const char* why) {
  TCGEMM_CHECK_TYPE(dtype_of(s) == ScalarType::Char, op, ": argument '", name, "' must have dtype torch.int8, got ",
                    dtype_name(dtype_of(s)));
  check_same_device(op, s, name, ref, ref_name);
  const int64_t kb = scale_blocks(k);
  TCGEMM_CHECK_VALUE(s.dim() == 2 && s.size(0) == n && s.size(1) == kb, op, ": argument '", name,
                     "' must have shape [N, ceil(K/128)] = [", num(n), ", ", num(kb), "], got ", shape_str(s));
  if (is_cpu(s) && s.numel() > 0) {  // a GPU tensor would need a synchronisation to read
    const auto [lo, hi] = int8_range_cpu(s);
    TCGEMM_CHECK_VALUE(lo >= low && hi <= high, op, ": argument '", name, "' must hold values in [", num(low), ", ",
                       num(high), "] (", why, "), got values in [", num(lo), ", ", num(hi), "]");
  }
}

}  // namespace

void check_group_scale(const char* op, const Tensor& s, const char* name, int64_t n, int64_t k, const Tensor& ref,
                       const char* ref_name) {
  check_group_table(op, s, name, n, k, ref, ref_name, kInt4GroupScaleMin, kInt4GroupScaleMax,
                    "every 4-bit value times its group scale must fit in int8");
}

void check_zero_point(const char* op, const Tensor& z, const char* name, int64_t n, int64_t k, const Tensor& ref,
                      const char* ref_name) {
  check_group_table(op, z, name, n, k, ref, ref_name, kInt4ZeroPointMin, kInt4ZeroPointMax,
                    "the zero points of 4-bit values");
}

Tensor unpack_int4_to_int8(const Tensor& packed, const Tensor* group_scale, int64_t k, const Tensor* zero_point) {
  const int64_t n = packed.size(0);
  // Rows padded to 16 bytes: the layout every GPU backend reads in place.
  const Tensor buf = empty({n, round_up<int64_t>(std::max<int64_t>(k, 1), 16)}, ScalarType::Char, packed);
  Tensor out = first_cols(buf, k);
  if (n == 0 || k == 0) return out;
  std::optional<Tensor> gs_copy;
  const Tensor* gs = group_scale != nullptr ? &dense(*group_scale, gs_copy) : nullptr;
  UnpackInt4Params p;
  p.packed = const_data<uint8_t>(packed);
  p.packed_stride = packed.size(0) == 1 ? k / kInt4PerByte : packed.stride(0);
  p.group_scale = gs ? const_data<int8_t>(*gs) : nullptr;
  p.group_scale_stride = gs ? gs->size(1) : 0;
  std::optional<Tensor> zp_copy;
  const Tensor* zp = zero_point != nullptr ? &dense(*zero_point, zp_copy) : nullptr;
  p.zero_point = zp ? const_data<int8_t>(*zp) : nullptr;
  p.zero_point_stride = zp ? zp->size(1) : 0;
  p.out = data<int8_t>(out);
  p.out_stride = buf.size(1);
  p.n = n;
  p.k = k;
  if (is_cuda(packed)) {
    const CudaDeviceScope scope(packed.get_device_index());
    p.stream = current_cuda_stream(packed.get_device_index());
    launch_unpack_int4(p);
  } else {
    cpu_parallel_for(n, std::max<int64_t>(1, (int64_t{1} << 16) / k),
                     [&](int64_t begin, int64_t end) { unpack_int4_rows(p, begin, end); });
  }
  return out;
}

InGemmUnpacking::InGemmUnpacking(GemmProblem& p, const Tensor& packed)
    : buffer(empty({p.n, p.k}, ScalarType::Char, packed)),  // K % 32 == 0: rows 16-byte aligned
      flags(empty({sm90::in_gemm_unpack_flag_words(p.n, p.k)}, ScalarType::Int, packed)) {
  zero(flags);
  if (p.b_zero_point != nullptr)
    throw std::logic_error("tcgemm: the unpacking GEMM got 4-bit zero points, which it does not read");
  source.packed = static_cast<const uint8_t*>(p.b.ptr);
  source.packed_stride = packed_b_row_stride(p);
  source.group_scale = p.b_group_scale;
  source.group_scale_stride = p.b_group_scale_stride;
  source.flags = reinterpret_cast<uint32_t*>(data<int32_t>(flags));
  source.flag_words = flags.size(0);
  p.b = describe(buffer, false);
  p.b_int4 = false;
  p.b_group_scale = nullptr;
  p.b_group_scale_stride = 0;
  p.b_unpack = &source;
}

std::optional<Tensor> w4_ordered_a(Backend b, GemmProblem& p, const DeviceInfo& dev, bool per_block,
                                   const Tensor& like) {
  if (!a_w4_order(b, p, dev, per_block)) return std::nullopt;
  // The rows (K % 128 == 0: 16-byte aligned), then their int32 sums over K
  Tensor buffer = empty({p.m * p.k + 4 * p.m}, ScalarType::Byte, like);
  int8_t* rows = reinterpret_cast<int8_t*>(data<uint8_t>(buffer));
  int32_t* sums = reinterpret_cast<int32_t*>(data<uint8_t>(buffer) + p.m * p.k);
  sm90::launch_w4_order(static_cast<const int8_t*>(p.a.ptr), p.a.stride_row, p.a.stride_k, rows, p.k, sums, p.m, p.k,
                        p.stream, p.pdl);
  p.a.ptr = rows;
  p.a.stride_row = p.k;
  p.a.stride_k = 1;
  p.a.is_signed = true;
  p.a_w4_order = true;
  p.a_w4_rowsum = sums;
  return buffer;
}

namespace {

constexpr const char* kUnpackOp = "tcgemm.unpack_int4";
constexpr const char* kGemmOp = "tcgemm.gemm_int4";

Tensor unpack_int4(const Tensor& packed, const std::optional<Tensor>& group_scale,
                   const std::optional<Tensor>& zero_point) {
  const int64_t k = packed.dim() == 2 ? packed.size(1) * kInt4PerByte : 0;
  check_packed_weight(kUnpackOp, packed, "packed", k, "twice the bytes of a row");
  TCGEMM_CHECK_VALUE(is_cpu(packed) || is_cuda(packed), kUnpackOp,
                     ": argument 'packed' must be a CPU or CUDA tensor, got ", device_str(packed));
  if (group_scale.has_value())
    check_group_scale(kUnpackOp, *group_scale, "group_scale", packed.size(0), k, packed, "packed");
  if (zero_point.has_value()) {
    TCGEMM_CHECK_VALUE(!group_scale.has_value(), kUnpackOp,
                       ": arguments 'group_scale' and 'zero_point' exclude each other (asymmetric 4-bit weights "
                       "have fp32 scales, no int8 group scales)");
    check_zero_point(kUnpackOp, *zero_point, "zero_point", packed.size(0), k, packed, "packed");
  }
  Tensor out = unpack_int4_to_int8(packed, group_scale.has_value() ? &*group_scale : nullptr, k,
                                   zero_point.has_value() ? &*zero_point : nullptr);
  if (!out.is_contiguous()) return contiguous_clone(out);
  return out;
}

Tensor gemm_int4(const Tensor& a, const Tensor& b, const std::optional<Tensor>& group_scale,
                 std::string_view backend_arg) {
  const Backend requested = parse_backend_arg(kGemmOp, backend_arg);
  check_operand(kGemmOp, a, "a", "[M, K]", /*signed_only=*/true);
  check_same_device(kGemmOp, b, "b", a);
  const int64_t m = a.size(0), k = a.size(1);
  check_packed_weight(kGemmOp, b, "b", k, "the columns of 'a'");
  const int64_t n = b.size(0);
  const Tensor* gs = group_scale.has_value() ? &*group_scale : nullptr;
  if (gs != nullptr) check_group_scale(kGemmOp, *gs, "group_scale", n, k, a, "a");
  TCGEMM_CHECK_VALUE(k <= kMaxUnblockedK, kGemmOp, ": K = ", num(k), " > ", num(kMaxUnblockedK),
                     " could overflow the int32 accumulator");
  Tensor out = empty({m, n}, ScalarType::Int, a);
  if (m == 0 || n == 0) return out;
  if (k == 0) {
    zero(out);
    return out;
  }
  if (is_cpu(a)) {
    check_cpu_backend(kGemmOp, requested);
    return gemm(a, transposed(unpack_int4_to_int8(b, gs, k)), std::nullopt, 1, 0, "cpu");
  }
  TCGEMM_CHECK_VALUE(is_cuda(a), kGemmOp, ": argument 'a' must be a CPU or CUDA tensor, got ", device_str(a));
  const CudaDeviceScope scope(a.get_device_index());
  const DeviceInfo dev = device_info(a);
  Int32EpilogueParams e;
  Backend backend = Backend::kAuto;
  const std::string why_not = resolve_gpu_backend(requested, dev, e, &backend);
  TCGEMM_CHECK_VALUE(why_not.empty(), kGemmOp, ": ", why_not, " (argument 'backend')");
  GemmProblem p = gemm_problem(a, b, data<int32_t>(out), n, OutType::kInt32, /*b_rows=*/true);
  p.k = static_cast<int>(k);
  p.b_int4 = true;
  p.b.is_signed = true;  // the 4-bit values are two's complement (the bytes are uint8)
  std::optional<Tensor> gs_copy;
  const Tensor* gs_c = gs != nullptr ? &dense(*gs, gs_copy) : nullptr;
  p.b_group_scale = gs_c ? const_data<int8_t>(*gs_c) : nullptr;
  p.b_group_scale_stride = gs_c ? gs_c->size(1) : 0;
  std::optional<InGemmUnpacking> in_gemm;  // the int8 buffer, flags and source of an unpacking GEMM
  if (unpacks_in_gemm(backend, p, dev, /*per_block=*/false)) {
    in_gemm.emplace(p, b);
  } else if (!reads_packed_b(backend, p, dev, /*per_block=*/false)) {  // the int8 GEMM of the unpacked weight
    return gemm(a, transposed(unpack_int4_to_int8(b, gs, k)), std::nullopt, 1, 0, backend_arg);
  }
  p.stream = current_cuda_stream(a.get_device_index());
  // A in the W4 kernel's K order where it runs p; else K-major, 16-byte aligned for the skinny kernel
  std::optional<Tensor> a_copy = w4_ordered_a(backend, p, dev, /*per_block=*/false, a);
  if (!a_copy && !operand_fits(backend, p.a, p.m, p.k)) {
    a_copy = k_major_copy(a, false);
    p.a = describe(*a_copy, false);
  }
  run_gpu(backend, p, e, dev);
  return out;
}

// The registered kernels, in the types the stable ABI unboxes to.
Tensor unpack_int4_kernel(const Tensor& packed, const std::optional<Tensor>& group_scale,
                          const std::optional<Tensor>& zero_point) {
  return unpack_int4(packed, group_scale, zero_point);
}

Tensor gemm_int4_kernel(const Tensor& a, const Tensor& b, const std::optional<Tensor>& group_scale,
                        const std::string& backend) {
  return gemm_int4(a, b, group_scale, backend);
}

void register_kernels(Library& m) {
  m.impl("unpack_int4", TCGEMM_BOX(unpack_int4_kernel));
  m.impl("gemm_int4", TCGEMM_BOX(gemm_int4_kernel));
}

}  // namespace

TCGEMM_IMPL_CPU_AND_CUDA(register_kernels)

}  // namespace tcgemm

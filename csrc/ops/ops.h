// The ops' implementations, for the op that composes them (quant_linear.cpp): each registered op
// validates its arguments and calls these. `overlap` asks for programmatic dependent launches
// where the device has them (common/launch_kernel.cuh); it changes no result.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include "common/problem.h"
#include "common/quantize_params.h"
#include "dispatch/backends.h"
#include "epilogue/scaled_epilogue.h"
#include "ops/torch_api.h"

namespace tcgemm {

// int8 x int8 dot products of this length fit in int32: longer K needs per-block scales.
constexpr int64_t kMaxUnblockedK = 131071;

// The element types tcgemm.quantize reads (quantize.cpp); nullopt for any other.
std::optional<QuantDtype> quant_dtype_of(ScalarType t);

// tcgemm.gemm on its arguments (gemm.cpp).
Tensor gemm(const Tensor& a, const Tensor& b, const std::optional<Tensor>& c, int64_t alpha, int64_t beta,
            std::string_view backend);

// Packed 4-bit weights (int4.cpp; common/int4.h has the format). A packed weight `name`: uint8
// [N, K/2], contiguous along K, for K (from `k_from`, in messages) even.
void check_packed_weight(const char* op, const Tensor& w, const char* name, int64_t k, const char* k_from);
// Two-level group scales `name`: int8 [N, ceil(K/128)] on the device of `ref`; on the CPU also
// their values, in [kInt4GroupScaleMin, kInt4GroupScaleMax].
void check_group_scale(const char* op, const Tensor& s, const char* name, int64_t n, int64_t k, const Tensor& ref,
                       const char* ref_name);
// Zero points `name` of asymmetric 4-bit weights: int8 [N, ceil(K/128)] on the device of `ref`;
// on the CPU also their values, in [kInt4ZeroPointMin, kInt4ZeroPointMax].
void check_zero_point(const char* op, const Tensor& z, const char* name, int64_t n, int64_t k, const Tensor& ref,
                      const char* ref_name);
// The int8 [N, K] weight of a checked packed one, less its zero points and times its group scales
// where given (rows padded to 16 bytes: every GPU backend reads it in place), on its device and
// stream.
Tensor unpack_int4_to_int8(const Tensor& packed, const Tensor* group_scale, int64_t k,
                           const Tensor* zero_point = nullptr);
// p's packed B (p.b_int4, its group scales in p) handed to the GEMM kernel to unpack as it runs
// (dispatch/launch.h: unpacks_in_gemm): p.b becomes an int8 [N, K] buffer on the device of
// `packed`, and p.b_unpack points to the source and zeroed flags held here, which must outlive
// the launch (hence neither copied nor moved).
struct InGemmUnpacking {
  Tensor buffer, flags;
  InGemmUnpack source;

  InGemmUnpacking(GemmProblem& p, const Tensor& packed);
  InGemmUnpacking(const InGemmUnpacking&) = delete;
  InGemmUnpacking& operator=(const InGemmUnpacking&) = delete;
};

// Where resolved backend b runs p on the W4 kernel (dispatch/launch.h: a_w4_order), p's A rewritten
// in that kernel's K order into a new tensor on the device of `like` (on p.stream, which must be
// set), which p then describes and which must outlive the launch; otherwise nothing. With p.pdl the
// ordering pass overlaps the kernel before it (and the W4 kernel after it).
std::optional<Tensor> w4_ordered_a(Backend b, GemmProblem& p, const DeviceInfo& dev, bool per_block,
                                   const Tensor& like);

// Static scales must be positive finite numbers: checked on CPU tensors (quantize.cpp).
void check_static_scale_values(const char* op, const char* name, const Tensor& s);

// The checks of a SmoothQuant multiplier for x [..., K]: fp32 [K] on x's device (quantize.cpp).
void check_smooth(const char* op, const Tensor& smooth, const Tensor& x);

// Zero points must lie in [-128, 127]: checked on CPU tensors (quantize.cpp).
void check_static_zero_point_values(const char* op, const char* name, const Tensor& z);

// Asymmetric quantization (enabled), with the validated static zero point (or none: dynamic).
struct AsymmetricArgs {
  bool enabled = false;
  std::optional<Tensor> zero_point;
};

// x [..., K] seen as m rows of k values, read in place: element (r, c) at r * stride_row +
// c * stride_col (quantize.cpp).
struct Rows {
  int64_t m = 0, k = 0, stride_row = 0, stride_col = 1;
};
// The rows of x (at least 1-D) without a view, or nullopt where its leading dimensions do not
// collapse into one stride (the caller reshapes then).
std::optional<Rows> rows_of(const Tensor& x);

// Where a quantization writes: q (rows q_stride_row bytes apart), the scales and zero points
// (contiguous, shaped as tcgemm.quantize returns them). Static scales (and zero points) must
// already hold a copy of the given ones, except when by_kernel: one block over a small x writes
// them itself (static_by_one_block).
struct QuantizeTargets {
  int8_t* q = nullptr;
  int64_t q_stride_row = 0;
  float* scale_out = nullptr;
  int32_t* zero_out = nullptr;
  bool by_kernel = false;
  int32_t* w4_rowsum = nullptr;  // QuantizeParams::w4_rowsum
};

// Whether a static quantization of x's rows is one block that writes the returned scale.
bool static_by_one_block(const Tensor& x, const Rows& r, QuantGranularity granularity, bool is_static);

// The quantize kernels' description of the rows `r` of x (x, its strides, m, k, dtype,
// granularity); targets, static scales and multipliers are the caller's (quantize.cpp).
QuantizeParams quantize_params(const Tensor& x, const Rows& r, QuantDtype dtype, QuantGranularity granularity);

// Quantizes the validated rows `r` of x into `t` (nothing for an empty x); `smooth` (validated)
// or null; rotate: each 128-value block of a row rotated first (QuantizeParams::rotate; checked
// by check_rotate) (quantize.cpp).
void quantize_to(const Tensor& x, const Rows& r, QuantDtype dtype, QuantGranularity granularity,
                 const std::optional<Tensor>& scale, const Tensor* smooth, bool overlap, const AsymmetricArgs& asym,
                 const QuantizeTargets& t, bool rotate = false);

// The checks of rotate=True for x [..., K] (quantize.cpp): dynamic symmetric scales per token or
// per group, no SmoothQuant, K a multiple of 128.
void check_rotate(const char* op, const Tensor& x, QuantGranularity granularity, bool is_static, bool smooth,
                  bool asymmetric);

// How scaled_gemm_impl is called, besides its operands.
struct ScaledGemmCall {
  bool overlap = false;              // programmatic dependent launch where the device has it
  bool b_rows = false;               // b is given as its [N, K] rows (an nn.Linear weight), not as [K, N]
  const Sizes* out_shape = nullptr;  // the output's shape ([..., N], M rows in all); none: [M, N]
  const Tensor* colsum_i32 = nullptr;  // B's int32 contiguous [N] column sums (with zero points)
  // A's m rows of k described directly (quant_linear's quantized rows in its scratch buffer:
  // K-major and 16-byte aligned, which every backend reads in place); `a` then only owns that
  // memory and gives the device.
  const Operand* a_rows = nullptr;
  int64_t m = 0, k = 0;
  // B given as a packed 4-bit weight [N, K/2] (b_rows), with its int8 group scales or none: the
  // skinny and sm90 kernels read it as it is where they can (reads_packed_b), other backends and
  // shapes its unpacked int8 weight.
  bool b_int4 = false;
  const Tensor* b_group_scale = nullptr;
  // Its int8 zero points per 1x128 group (asymmetric 4-bit weights), or none: read by the skinny
  // kernel with fp32 scales per K block, else subtracted as the weight is unpacked into int8.
  const Tensor* b_zero_point = nullptr;
  // Its fp32 per-block scales per 128 / b_scale_groups inputs (GemmProblem::b_scale_groups: 2 or 4
  // for groups of 64 or 32), read on the GPU by the skinny kernel only, at any M.
  int b_scale_groups = 1;
  // Or A quantized by the GEMM kernel itself from the float rows xq describes (quant_linear at a
  // few rows, where gemm_quantizes_a said so; m and k as above): one kernel for the layer.
  const QuantizeParams* quantize_a = nullptr;
  // a_rows already in the W4 kernel's K order, with their sums over K here (quant_linear's
  // quantization wrote them so where gemm_reads_w4_order said the W4 kernel reads A): no
  // ordering pass.
  const int32_t* a_w4_rowsum = nullptr;
};

// Whether scaled_gemm_impl can take A as ScaledGemmCall::quantize_a = &xq: the `requested`
// backend resolves to the skinny kernel for this shape, which then quantizes x itself
// (skinny::quantizes_in_kernel) and reads `weight` [N, K] in place (scaled_gemm.cpp).
// zero_points: the packed weight has zero points (ScaledGemmCall::b_zero_point); scale_groups: its
// fp32 scales' groups per K block (ScaledGemmCall::b_scale_groups).
bool gemm_quantizes_a(Backend requested, const Tensor& weight, const ScaledEpilogueParams& e, const QuantizeParams& xq,
                      bool zero_points = false, int scale_groups = 1);

// Whether scaled_gemm_impl runs a packed 4-bit `weight` [N, K/2] (call: b_int4, its group scales,
// zero points and scale groups, call.m rows of call.k) on the W4 kernel for a symmetric int8 A:
// A must then be in the W4 K order with its rows' sums (ScaledGemmCall::a_w4_rowsum), which the
// quantization of x can write directly (scaled_gemm.cpp).
bool gemm_reads_w4_order(Backend requested, const Tensor& weight, const ScaledEpilogueParams& e,
                         const ScaledGemmCall& call);

// tcgemm.scaled_gemm on validated operands whose scales are decoded into e.a / e.b (and zero
// points into e.a_zero); `bias_f32` is an fp32 contiguous [N] tensor or null. Errors name
// `op` (scaled_gemm.cpp).
Tensor scaled_gemm_impl(const char* op, Backend requested, const Tensor& a, const Tensor& b, ScaledEpilogueParams e,
                        const Tensor* bias_f32, ScalarType out_dtype, const ScaledGemmCall& call = {});

// Checks optional int32 [N] column sums of a weight and returns them contiguous: `colsum` itself
// where it is, else a copy held in `copy`; null for none. (Borrowed, not a new handle: each handle
// is a heap object of torch's, host time on every call.)
const Tensor* checked_colsum(const char* op, const std::optional<Tensor>& colsum, const char* name, int64_t n,
                             const Tensor& ref, const char* ref_name, std::optional<Tensor>& copy);

// Zero points need K <= kMaxAsymmetricK (epilogue/scaled_epilogue.h); the error names `zero_name`.
void check_asymmetric_k(const char* op, int64_t k, const char* zero_name);

// Checks an optional bias (float [N] on the device of `ref`, named `ref_name` in messages) and
// returns it as fp32 contiguous: `bias` itself where it is, else a converted copy held in `copy`;
// null for none (scaled_gemm.cpp).
const Tensor* checked_bias_f32(const char* op, const std::optional<Tensor>& bias, int64_t n, const Tensor& ref,
                               const char* ref_name, std::optional<Tensor>& copy);

// The pointer and shape of an fp32 scale tensor as common/scale_layout.h reads it.
ScaleTensor scale_tensor(const Tensor& s);

}  // namespace tcgemm

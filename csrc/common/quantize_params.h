// The plain description of one int8 quantization (symmetric, or asymmetric with a zero point),
// and the scalar math every path
// (CUDA kernels, CPU kernel) shares so that their results are bit-identical.
// Nothing here depends on torch.
#pragma once

#include <cstdint>
#include <limits>

#include <cuda_runtime_api.h>

#include "common/hd.h"
#include "common/scale_layout.h"

#if defined(__CUDACC__)
#include "ptx/minmax.cuh"
#endif
#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace tcgemm {

enum class QuantDtype : int { kBFloat16, kFloat16, kFloat32 };

// The x whose static per-tensor quantization one block does (scale_out_by_kernel): at most
// kStaticOneBlockRows rows of at least kStaticOneBlockMinK values (every thread of the block has
// a vector in each row), at most kStaticOneBlockElems values in all.
constexpr int64_t kStaticOneBlockElems = 16384;
constexpr int64_t kStaticOneBlockRows = 4;
constexpr int64_t kStaticOneBlockMinK = 2048;

struct QuantizeParams {
  const void* x = nullptr;   // [M, K] of `dtype`
  int64_t m = 0;
  int64_t k = 0;
  int64_t x_stride_row = 0;  // elements between consecutive rows of x
  int64_t x_stride_col = 1;  // elements between consecutive values of a row (0: a broadcast row)
  QuantDtype dtype = QuantDtype::kFloat32;
  QuantGranularity granularity = QuantGranularity::kToken;
  int8_t* q = nullptr;       // [M, K], rows q_stride_row bytes apart (a multiple of 16 when > K)
  int64_t q_stride_row = 0;
  // The returned scales ([] / [M, 1] / [M, G], contiguous). Dynamic: computed and written here.
  // Static: a copy of the given ones, where the kernels write NaN for every group that holds a
  // non-finite x or has an invalid scale (see "Bad data" below).
  float* scale_out = nullptr;
  // SmoothQuant: [K] fp32 multipliers, contiguous; x[m, k] * channel_mul[k] (one fp32 product)
  // is what is quantized, amax included. Null: none.
  const float* channel_mul = nullptr;
  // Static: the given scales (contiguous, same shapes); null selects dynamic quantization.
  const float* scale_in = nullptr;
  // Asymmetric (kTensor static or kToken only): x ~ scale * (q - zero), q in [-128, 127].
  // zero_out is shaped like scale_out: computed (dynamic) or a copy of zero_in (static, the
  // given int32 zero points, contiguous).
  bool asymmetric = false;
  int32_t* zero_out = nullptr;
  const int32_t* zero_in = nullptr;
  // Static per tensor on the GPU, a small x (kStaticOneBlock*, above): one block covers all
  // of x and writes the returned scale itself (the given one, or NaN for bad data), so that no
  // copy of the given scale precedes the kernel (a graph node and a dispatch at decode).
  bool scale_out_by_kernel = false;
  // Per-tensor dynamic on the GPU only: 4 bytes of device memory for the grid-wide amax.
  void* workspace = nullptr;
  // Programmatic dependent launch (sm_90+; tcgemm.quant_linear): the token, group and static
  // kernels may start before the previous kernel on the stream ends (they touch memory only after
  // ptx::griddep_wait) and let the GEMM after them start early (ptx::griddep_launch_dependents).
  bool pdl = false;
  // Rotated (tcgemm.rotation): each block of kScaleBlock values of a row is multiplied by the
  // orthonormal Hadamard matrix before it is quantized (hadamard_block below), amax included.
  // Dynamic symmetric per token or per group only, no channel_mul, K a multiple of kScaleBlock;
  // on the GPU x is read as 16-byte vectors (the op layer copies any other layout).
  bool rotate = false;
  // Non-null (tcgemm.quant_linear where the W4 kernel reads x): the rows go into q in the W4 K
  // order (common/int4.h) and each row's sum over K of its int8 values into w4_rowsum[row], which
  // the W4 kernel would otherwise have a pass write. Dynamic symmetric per token, 16-bit x read as
  // 16-byte vectors, K a multiple of kScaleBlock, rotated or not; GPU only.
  int32_t* w4_rowsum = nullptr;
  cudaStream_t stream = nullptr;

  TCGEMM_HD int64_t groups() const { return scale_blocks(k); }

  // Values of x per 16-byte vector: 8 bf16/fp16 or 4 fp32.
  int x_vec() const { return dtype == QuantDtype::kFloat32 ? 4 : 8; }
  // Whether the GPU kernels can read x as 16-byte vectors: an aligned base and row stride, a unit
  // K stride, K a multiple of the vector. rows_strided false: a kernel that reads one row only,
  // whose row stride does not count.
  bool x_as_vectors(bool rows_strided = true) const {
    const int64_t vec = x_vec();
    return reinterpret_cast<uintptr_t>(x) % 16 == 0 && (!rows_strided || x_stride_row % vec == 0) &&
           x_stride_col == 1 && k % vec == 0;
  }
};

// 1 / sqrt(kScaleBlock) rounded to fp32: the orthonormal Hadamard matrix's entries are +-this.
constexpr float kHadamardNorm = 0.0883883476483184405f;

// The butterfly of one stage of the rotation: (a, b) -> (a + b, a - b), each rounded once.
TCGEMM_HD void hadamard_pair(float& a, float& b) {
  const float sum = a + b, diff = a - b;
  a = sum;
  b = diff;
}

// A block of kScaleBlock values times the orthonormal Hadamard matrix of Sylvester's order
// (H[i][j] = (-1)^popcount(i & j) / sqrt(128)), the rotation every path computes in this order:
// fp32 butterflies of strides 1, 2, 4, ..., 64 (element i with element i + h, i's bit h clear),
// then each value times kHadamardNorm. The GPU kernels compute the same stages across a warp's
// lanes (quant::hadamard128), so the rotated values are the same bits everywhere
// (tcgemm.rotation.rotate_blocks in fp32 too).
inline void hadamard_block(float* v) {
  for (int h = 1; h < kScaleBlock; h *= 2) {
    for (int i = 0; i < kScaleBlock; ++i) {
      if ((i & h) == 0) hadamard_pair(v[i], v[i + h]);
    }
  }
  for (int i = 0; i < kScaleBlock; ++i) v[i] *= kHadamardNorm;
}

// IEEE round-to-nearest fp32 division on both sides. On the device `/` may be compiled to a
// reciprocal approximation under fast-math flags; __fdiv_rn never is. Host code is built
// without fast-math, so `/` is the correctly rounded division there.
TCGEMM_HD float quant_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Bad data, the same rule on every path (README, "Numerics"): NaN and inf never turn into finite
// values.
//   - The amax of a group that holds a NaN or an inf is not finite (amax_fold), and its scale
//     is NaN (quant_scale_from_amax): the whole group quantizes to 0, and everything the GEMM
//     computes from that scale is NaN.
//   - A static scale that is not a positive finite number quantizes its group to 0, and a
//     non-finite x quantizes to 0; in both cases the returned scale of the group is NaN.
TCGEMM_HD bool quant_finite(float v) {
#if defined(__CUDA_ARCH__)
  return fabsf(v) <= 3.402823466e38f;
#else
  return std::fabs(v) <= 3.402823466e38f;
#endif
}
TCGEMM_HD bool quant_scale_valid(float s) { return s > 0.f && s <= 3.402823466e38f; }

// The running amax with |x| folded in: NaN once any x was NaN, inf once any was inf.
TCGEMM_HD float amax_fold(float amax, float x) {
#if defined(__CUDA_ARCH__)
  return ptx::max_nan(amax, fabsf(x));
#else
  return (amax != amax || x != x) ? std::numeric_limits<float>::quiet_NaN() : std::fmax(amax, std::fabs(x));
#endif
}

// scale = amax / 127; 1 where amax == 0 (an all-zero group then quantizes to zeros); NaN where
// the amax is not finite.
TCGEMM_HD float quant_scale_from_amax(float amax) {
  if (amax == 0.f) return 1.f;
  if (!quant_finite(amax)) return std::numeric_limits<float>::quiet_NaN();
  return quant_div(amax, 127.f);
}

// clamp(round_half_even(x / scale), -127, 127) for a finite x and a valid scale. rintf rounds
// half to even in the default rounding mode on both sides.
TCGEMM_HD int8_t quant_value_finite(float x, float scale) {
#if defined(__CUDA_ARCH__)
  const float r = fminf(fmaxf(rintf(quant_div(x, scale)), -127.f), 127.f);
#else
  const float r = std::fmin(std::fmax(std::rint(quant_div(x, scale)), -127.f), 127.f);
#endif
  return static_cast<int8_t>(static_cast<int>(r));
}

// The rule for any x and scale: 0 for a non-finite x or an invalid scale.
TCGEMM_HD int8_t quant_value(float x, float scale) {
  return quant_finite(x) && quant_scale_valid(scale) ? quant_value_finite(x, scale) : int8_t{0};
}

// round half to even in the default rounding mode, on both sides.
TCGEMM_HD float quant_rint(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  return std::rint(v);
#endif
}

// The running max of x (NaN once any x was NaN), for the asymmetric range.
TCGEMM_HD float max_fold(float m, float x) {
#if defined(__CUDA_ARCH__)
  return ptx::max_nan(m, x);
#else
  return (m != m || x != x) ? std::numeric_limits<float>::quiet_NaN() : std::fmax(m, x);
#endif
}

// Asymmetric quantization (docs/design/quantize.md). The range of a group always holds 0, so it
// is [-neg_lo, hi] with hi = max(0, max x) and neg_lo = max(0, max -x):
//   scale = (hi + neg_lo) / 255, computed in fp64 and rounded once to fp32 (the fp32 sum could
//           overflow); 1 where the group is all zeros; NaN where the range is not finite;
//   zero  = round_half_even(neg_lo / scale) - 128 in [-128, 127], so 0 quantizes to zero
//           exactly and the group's minimum to -128 (up to rounding); 0 for an invalid scale;
//   q     = clamp(round_half_even(x / scale) + zero, -128, 127).
TCGEMM_HD float quant_asym_scale(float hi, float neg_lo) {
  if (hi == 0.f && neg_lo == 0.f) return 1.f;
  if (!quant_finite(hi) || !quant_finite(neg_lo)) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>((static_cast<double>(hi) + static_cast<double>(neg_lo)) / 255.0);
}

TCGEMM_HD int32_t quant_asym_zero(float neg_lo, float scale) {
  if (!quant_scale_valid(scale)) return 0;
  const float r = quant_rint(quant_div(neg_lo, scale));
  return static_cast<int32_t>(r < 0.f ? 0.f : r > 255.f ? 255.f : r) - 128;
}

// A zero point the asymmetric int8 range can hold (a static one outside it marks its group bad,
// like an invalid scale).
TCGEMM_HD bool quant_zero_valid(int32_t zero) { return zero >= -128 && zero <= 127; }

TCGEMM_HD int8_t quant_clamp_int8(int32_t v) { return static_cast<int8_t>(v < -128 ? -128 : v > 127 ? 127 : v); }

// The range of one group, folded value by value: max |x| (symmetric), or hi and neg_lo
// (asymmetric). Partial ranges combine with merge(); the kernels reduce the fields across
// threads with the same NaN-propagating max.
template <bool Asymmetric>
struct QuantRange {
  float amax = 0.f;
  TCGEMM_HD void fold(float x) { amax = amax_fold(amax, x); }
  TCGEMM_HD void merge(const QuantRange& o) { amax = max_fold(amax, o.amax); }
  TCGEMM_HD float scale() const { return quant_scale_from_amax(amax); }
  TCGEMM_HD int32_t zero(float) const { return 0; }
};

template <>
struct QuantRange<true> {
  float hi = 0.f;
  float neg_lo = 0.f;
  TCGEMM_HD void fold(float x) {
    hi = max_fold(hi, x);
    neg_lo = max_fold(neg_lo, -x);
  }
  TCGEMM_HD void merge(const QuantRange& o) {
    hi = max_fold(hi, o.hi);
    neg_lo = max_fold(neg_lo, o.neg_lo);
  }
  TCGEMM_HD float scale() const { return quant_asym_scale(hi, neg_lo); }
  TCGEMM_HD int32_t zero(float scale) const { return quant_asym_zero(neg_lo, scale); }
};

// clamp(round_half_even(x / scale) + zero, -128, 127) for a finite x and a valid scale.
TCGEMM_HD int8_t quant_value_asym_finite(float x, float scale, int32_t zero) {
  const float r = quant_rint(quant_div(x, scale));
  const float c = r < -255.f ? -255.f : r > 255.f ? 255.f : r;
  return quant_clamp_int8(static_cast<int32_t>(c) + zero);
}

// Any x and scale: the zero point (the quantized 0) for a non-finite x or an invalid scale.
TCGEMM_HD int8_t quant_value_asym(float x, float scale, int32_t zero) {
  return quant_finite(x) && quant_scale_valid(scale) ? quant_value_asym_finite(x, scale, zero) : quant_clamp_int8(zero);
}

// One scale applied to many values, prepared once (per row or group): on the GPU,
// quant_value_fast(x, divisor) returns exactly quant_value(x, scale) with cheaper arithmetic, where __fdiv_rn and
// rintf + float-to-int cost three quarter-rate instructions per element (MUFU reciprocal,
// FCHK, F2I) and made the quantize kernels compute-bound.
//   - x must be finite (a group with a finite amax holds only finite values; the static kernel
//     zeroes non-finite ones first). x is clamped to +-bound, bound = RN(127 * scale): every
//     |x| >= bound quantizes to +-127 either way (x / scale is then within 2^-16 of 127 or beyond).
//   - x / scale, correctly rounded, from recip = RN(1 / scale): q0 = RN(x * recip) is within
//     2 ulp of x / scale; one residual step q1 = RN(q0 + (x - scale * q0) * recip) (the
//     residual exact by FMA) is within 1 ulp (faithful); a second step returns RN(x / scale)
//     (Markstein's theorem: a faithful quotient plus its exact residual times the correctly
//     rounded reciprocal rounds to the correctly rounded quotient). That needs no overflow or
//     underflow on the way, which `fast` guarantees (2^-90 <= scale <= 2^90, |x| <= bound);
//     quotients below 2^-30 in magnitude may be off by an ulp but quantize to 0 either way.
//   - round half to even and the conversion: adding 1.5 * 2^23 rounds the (|q| < 2^22) value
//     to an integer in the mantissa in the default rounding mode, whose low byte is the int8.
// Other valid scales (denormal, huge) are not `fast` and take quant_value_finite; an invalid one
// (0, negative, inf, NaN) quantizes everything to 0. The kernels branch on these once per scale,
// so no per-element check is needed: their x are finite (a finite amax, or the static kernel's
// zeroing).
struct QuantDivisor {
  float scale;
  float recip;  // RN(1 / scale) when fast
  float bound;  // RN(127 * scale) when fast
  bool fast;
  bool valid;

  // qmax: the largest |x / scale| that matters, 127 (symmetric) or 255 (asymmetric, where the
  // zero point shifts the range).
  TCGEMM_HD explicit QuantDivisor(float s, float qmax = 127.f)
      : scale(s), recip(0.f), bound(0.f), fast(s >= 0x1p-90f && s <= 0x1p90f), valid(quant_scale_valid(s)) {
    if (fast) {
      recip = quant_div(1.f, s);
      bound = qmax * s;
    }
  }
};

#if defined(__CUDA_ARCH__)
// round_half_even(x / d.scale) clamped to +-qmax, for a finite x and a divisor with d.fast (the
// caller branches once per scale).
__device__ __forceinline__ int32_t quant_round_fast(float x, const QuantDivisor& d) {
  const float xc = fminf(fmaxf(x, -d.bound), d.bound);
  const float q0 = __fmul_rn(xc, d.recip);
  const float q1 = __fmaf_rn(__fmaf_rn(-d.scale, q0, xc), d.recip, q0);
  const float q = __fmaf_rn(__fmaf_rn(-d.scale, q1, xc), d.recip, q1);
  return __float_as_int(__fadd_rn(q, 12582912.0f)) - 0x4B400000;  // 1.5 * 2^23 is 0x4B400000
}

// quant_value(x, d.scale) for a finite x and a divisor with d.fast (qmax 127).
__device__ __forceinline__ int8_t quant_value_fast(float x, const QuantDivisor& d) {
  return static_cast<int8_t>(quant_round_fast(x, d));
}

// quant_value_asym(x, d.scale, zero) for a finite x and a divisor with d.fast (qmax 255).
__device__ __forceinline__ int8_t quant_value_asym_fast(float x, const QuantDivisor& d, int32_t zero) {
  return quant_clamp_int8(quant_round_fast(x, d) + zero);
}
#endif

}  // namespace tcgemm

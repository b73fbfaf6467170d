// The plain description of one symmetric int8 quantization, and the scalar math every path
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

// kTensor: one scale for all of x. kToken: one per row. kGroup: one per row and kScaleBlock-wide
// K group (the activation blocks of the scaled GEMM); G = scale_blocks(K), the last may be short.
enum class QuantGranularity : int { kTensor, kToken, kGroup };

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
  int8_t* q = nullptr;       // [M, K], contiguous
  // The returned scales ([] / [M, 1] / [M, G], contiguous). Dynamic: computed and written here.
  // Static: a copy of the given ones, where the kernels write NaN for every group that holds a
  // non-finite x or has an invalid scale (see "Bad data" below).
  float* scale_out = nullptr;
  // SmoothQuant: [K] fp32 multipliers, contiguous; x[m, k] * channel_mul[k] (one fp32 product)
  // is what is quantized, amax included. Null: none.
  const float* channel_mul = nullptr;
  // Static: the given scales (contiguous, same shapes); null selects dynamic quantization.
  const float* scale_in = nullptr;
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
  cudaStream_t stream = nullptr;

  TCGEMM_HD int64_t groups() const { return scale_blocks(k); }
};

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

  TCGEMM_HD explicit QuantDivisor(float s)
      : scale(s), recip(0.f), bound(0.f), fast(s >= 0x1p-90f && s <= 0x1p90f), valid(quant_scale_valid(s)) {
    if (fast) {
      recip = quant_div(1.f, s);
      bound = 127.f * s;
    }
  }
};

#if defined(__CUDA_ARCH__)
// quant_value(x, d.scale) for a finite x and a divisor with d.fast (the caller branches once per scale).
__device__ __forceinline__ int8_t quant_value_fast(float x, const QuantDivisor& d) {
  const float xc = fminf(fmaxf(x, -d.bound), d.bound);
  const float q0 = __fmul_rn(xc, d.recip);
  const float q1 = __fmaf_rn(__fmaf_rn(-d.scale, q0, xc), d.recip, q0);
  const float q = __fmaf_rn(__fmaf_rn(-d.scale, q1, xc), d.recip, q1);
  return static_cast<int8_t>(__float_as_int(__fadd_rn(q, 12582912.0f)) & 0xff);
}
#endif

}  // namespace tcgemm

// The plain description of one symmetric int8 quantization, and the scalar math every path
// (CUDA kernels, CPU kernel) shares so that their results are bit-identical.
// Nothing here depends on torch.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/hd.h"
#include "common/scale_layout.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace tcgemm {

enum class QuantDtype : int { kBFloat16, kFloat16, kFloat32 };

// kTensor: one scale for all of x. kToken: one per row. kGroup: one per row and kScaleBlock-wide
// K group (the activation blocks of the scaled GEMM); G = scale_blocks(K), the last may be short.
enum class QuantGranularity : int { kTensor, kToken, kGroup };

struct QuantizeParams {
  const void* x = nullptr;   // [M, K] of `dtype`, unit stride along K
  int64_t m = 0;
  int64_t k = 0;
  int64_t x_stride_row = 0;  // elements between consecutive rows of x
  QuantDtype dtype = QuantDtype::kFloat32;
  QuantGranularity granularity = QuantGranularity::kToken;
  int8_t* q = nullptr;       // [M, K], contiguous
  // Dynamic: the computed scales are written here ([] / [M, 1] / [M, G], contiguous).
  float* scale_out = nullptr;
  // Static: the given scales (contiguous, same shapes); null selects dynamic quantization.
  const float* scale_in = nullptr;
  // Per-tensor dynamic on the GPU only: 4 bytes of device memory for the grid-wide amax.
  void* workspace = nullptr;
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

// scale = amax / 127, and 1 where amax == 0 (an all-zero group then quantizes to zeros).
TCGEMM_HD float quant_scale_from_amax(float amax) { return amax == 0.f ? 1.f : quant_div(amax, 127.f); }

// clamp(round_half_even(x / scale), -127, 127). rintf rounds half to even in the default
// rounding mode on both sides. NaN (from 0/0 with a zero static scale) clamps to -127 on both
// sides because fmaxf/fminf return the non-NaN operand.
TCGEMM_HD int8_t quant_value(float x, float scale) {
#if defined(__CUDA_ARCH__)
  const float r = fminf(fmaxf(rintf(quant_div(x, scale)), -127.f), 127.f);
#else
  const float r = std::fmin(std::fmax(std::rint(quant_div(x, scale)), -127.f), 127.f);
#endif
  return static_cast<int8_t>(static_cast<int>(r));
}

// One scale applied to many values, prepared once (per row or group): on the GPU,
// quant_value_fast(x, divisor) returns exactly quant_value(x, scale) with cheaper arithmetic, where __fdiv_rn and
// rintf + float-to-int cost three quarter-rate instructions per element (MUFU reciprocal,
// FCHK, F2I) and made the quantize kernels compute-bound.
//   - x is first clamped to +-bound, bound = RN(127 * scale): every |x| >= bound quantizes to
//     +-127 either way (x / scale is then within 2^-16 of 127 or beyond it), and a NaN x
//     becomes -bound, i.e. -127, as before.
//   - x / scale, correctly rounded, from recip = RN(1 / scale): q0 = RN(x * recip) is within
//     2 ulp of x / scale; one residual step q1 = RN(q0 + (x - scale * q0) * recip) (the
//     residual exact by FMA) is within 1 ulp (faithful); a second step returns RN(x / scale)
//     (Markstein's theorem: a faithful quotient plus its exact residual times the correctly
//     rounded reciprocal rounds to the correctly rounded quotient). That needs no overflow or
//     underflow on the way, which `fast` guarantees (2^-90 <= scale <= 2^90, |x| <= bound);
//     quotients below 2^-30 in magnitude may be off by an ulp but quantize to 0 either way.
//   - round half to even and the conversion: adding 1.5 * 2^23 rounds the (|q| < 2^22) value
//     to an integer in the mantissa in the default rounding mode, whose low byte is the int8.
// Other scales (0, denormal, huge, inf, NaN, negative) are not `fast` and take quant_value.
struct QuantDivisor {
  float scale;
  float recip;  // RN(1 / scale) when fast
  float bound;  // RN(127 * scale) when fast
  bool fast;

  TCGEMM_HD explicit QuantDivisor(float s) : scale(s), recip(0.f), bound(0.f), fast(s >= 0x1p-90f && s <= 0x1p90f) {
    if (fast) {
      recip = quant_div(1.f, s);
      bound = 127.f * s;
    }
  }
};

#if defined(__CUDA_ARCH__)
// quant_value(x, d.scale) for a divisor with d.fast (the caller branches once per scale).
__device__ __forceinline__ int8_t quant_value_fast(float x, const QuantDivisor& d) {
  const float xc = fminf(fmaxf(x, -d.bound), d.bound);
  const float q0 = __fmul_rn(xc, d.recip);
  const float q1 = __fmaf_rn(__fmaf_rn(-d.scale, q0, xc), d.recip, q0);
  const float q = __fmaf_rn(__fmaf_rn(-d.scale, q1, xc), d.recip, q1);
  return static_cast<int8_t>(__float_as_int(__fadd_rn(q, 12582912.0f)) & 0xff);
}
#endif

}  // namespace tcgemm

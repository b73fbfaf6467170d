// The plain description of one symmetric int8 quantization, and the scalar math every path
// (CUDA kernels, CPU kernel) shares so that their results are bit-identical.
// Nothing here depends on torch.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/hd.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace tcgemm {

enum class QuantDtype : int { kBFloat16, kFloat16, kFloat32 };

// kTensor: one scale for all of x. kToken: one per row. kGroup: one per row and 128-wide K group.
enum class QuantGranularity : int { kTensor, kToken, kGroup };

constexpr int kQuantGroupSize = 128;

// G = ceil(K / 128): the last group of a row may be short.
TCGEMM_HD constexpr int64_t quant_groups(int64_t k) { return (k + kQuantGroupSize - 1) / kQuantGroupSize; }

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

  TCGEMM_HD int64_t groups() const { return quant_groups(k); }
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

}  // namespace tcgemm

// The scaled epilogue every kernel applies to its accumulators, the CPU path included:
//   D[m, n] = convert( float(acc[m, n]) * sa(m) * sb(n) + bias[n] )          (no per-block scale)
//   D[m, n] = convert( sum_kb float(acc_kb[m, n]) * sa(m, kb) * sb(n, kb) + bias[n] )  (per-block)
// in fp32 (an int32 sum times an fp16 scale could overflow fp16), rounded once to Out.
// For per-block scales the main loop promotes each 128-wide K block's exact int32 partial sum
// into fp32 accumulators (promote()); the epilogue then only adds the bias and converts.
//
// Kernels see this through the same small interface as Int32Epilogue:
//   Row row(m) / Col col(n): what one row / column contributes (loaded once, reused per element);
//   Out apply(acc, row, col): the value stored; needs_finish(): whether a second pass is due.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "common/gemm_params.h"
#include "common/hd.h"

namespace tcgemm {

// accf + partial * scale: one K block's exact partial sum folded into the fp32 accumulator.
// float(partial) is exact (|partial| <= 128 * 128 * 128 = 2^21 for a 128-deep int8 x int8 block)
// and compiles to one I2FP on sm_90: measured on the H200 1-5% faster per-block than the
// 1.5 * 2^23 magic-number conversion (one integer and one float add), benchmarks/NOTES-scaled.md.
TCGEMM_HD float promote(float accf, int32_t partial, float scale) {
  return accf + static_cast<float>(partial) * scale;
}

#if defined(__CUDACC__)
template <class Out>
__device__ __forceinline__ Out from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
#endif

template <class Out, bool PerBlock>
struct ScaledEpilogue {
  using OutT = Out;
  using Acc = std::conditional_t<PerBlock, float, int32_t>;  // what the main loop hands over
  static constexpr bool kPerBlock = PerBlock;
  ScaledEpilogueParams p;

  TCGEMM_HD float sa(int64_t m, int64_t kb) const { return p.scale_a[m * p.sa_stride_m + kb * p.sa_stride_kb]; }
  TCGEMM_HD float sb(int64_t n, int64_t kb) const {
    return p.scale_b[(n >> p.sb_n_shift) * p.sb_stride_n + kb * p.sb_stride_kb];
  }

  // Where row m's / column n's scales start; K block kb's lies kb * sa_stride_kb / sb_stride_kb further.
  TCGEMM_HD const float* sa_ptr(int64_t m) const { return p.scale_a + m * p.sa_stride_m; }
  TCGEMM_HD const float* sb_ptr(int64_t n) const { return p.scale_b + (n >> p.sb_n_shift) * p.sb_stride_n; }

  // Per-block: the factor the main loop promotes K block kb with is sa(m, kb) * block_scale_b(n, kb);
  // a weight scale that does not depend on kb (per-channel or per-tensor) waits for col().
  TCGEMM_HD float block_scale_b(int64_t n, int64_t kb) const { return p.sb_stride_kb != 0 ? sb(n, kb) : 1.0f; }

  struct Row {
    float scale;  // sa(m), or 1 when the per-block main loop applied it
  };
  struct Col {
    float scale;  // sb(n), or 1 when the per-block main loop applied it
    float bias;
  };
  // m and n must lie inside D (kernels clamp the indices of rows and columns they do not store).
  TCGEMM_HD Row row(int64_t m) const { return Row{PerBlock ? 1.0f : sa(m, 0)}; }
  TCGEMM_HD Col col(int64_t n) const {
    const bool in_main_loop = PerBlock && p.sb_stride_kb != 0;
    return Col{in_main_loop ? 1.0f : sb(n, 0), p.bias != nullptr ? p.bias[n] : 0.0f};
  }

  TCGEMM_HD float value(Acc acc, Row r, Col c) const {
    if constexpr (PerBlock) {
      return acc * c.scale + c.bias;
    } else {
      return static_cast<float>(acc) * r.scale * c.scale + c.bias;
    }
  }

#if defined(__CUDACC__)
  __device__ __forceinline__ Out apply(Acc acc, Row r, Col c) const { return from_float<Out>(value(acc, r, c)); }
  __device__ __forceinline__ Out full(Acc acc, Row r, Col c, int64_t, int64_t) const { return apply(acc, r, c); }
#endif
  TCGEMM_HD bool needs_finish() const { return false; }
};

}  // namespace tcgemm

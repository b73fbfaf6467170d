// The scaled epilogue every kernel applies to its accumulators, the CPU path included:
//   D[m, n] = convert( float(acc[m, n]) * (sa(m) * sb(n)) + bias[n] )                 (no per-block scale)
//   D[m, n] = convert( sum_kb float(acc_kb[m, n]) * (sa(m, kb) * sb(n, kb)) + bias[n] )  (per-block)
//   D[m, n] = convert( float(acc[m, n] - za(m) * colsum(n)) * (sa(m) * sb(n)) + bias[n] )  (asymmetric A)
// in fp32 (an int32 sum times an fp16 scale could overflow fp16), rounded once to Out. NaN and
// inf scales propagate (a NaN scale is how quantize marks a group that held NaN or inf).
// Asymmetric A (activations quantized with a zero point za, x = sa * (q - za)): the correction
// by B's column sums colsum(n) = sum_k B[k, n] is taken in int32 before the conversion, so
// acc - za * colsum = sum_k (q - za) * B is exact (two's-complement wrap-around of the products
// cancels whenever that true sum fits int32: K <= kMaxAsymmetricK, za in [-128, 127]; a row
// with a zero point outside that range is NaN). Not with per-block scales.
// For per-block scales the main loop promotes each 128-wide K block's exact int32 partial sum
// into fp32 accumulators (epilogue/block_scales.h); the epilogue then only applies what does not
// depend on the K block (a per-channel weight scale, the bias) and converts.
// The interface kernels call is described in epilogue/epilogues.h.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/hd.h"
#include "common/math.h"
#include "common/problem.h"
#include "common/scale_layout.h"
#include "epilogue/block_scales.h"
#if defined(__CUDACC__)
#include "ptx/prefetch.cuh"
#endif

namespace tcgemm {

// |sum_k (q - za) * b| <= 255 * 128 * K fits int32 up to this K (asymmetric A).
constexpr int64_t kMaxAsymmetricK = 65793;

// The int32 zero points of A's rows: za(m) = ptr[m * stride_row] (stride 0: one per tensor).
struct ZeroPointOperand {
  const int32_t* ptr = nullptr;  // null: A is symmetric
  int64_t stride_row = 0;

  TCGEMM_HD int32_t at(int64_t m) const { return ptr[m * stride_row]; }
};

struct ScaledEpilogueParams {
  ScaleOperand a;               // scale_a over A's rows [M, K]
  ScaleOperand b;               // scale_b over B's columns, seen as [N, K]
  const float* bias = nullptr;  // [N] fp32, or null
  ZeroPointOperand a_zero;      // asymmetric A: its zero points, and B's column sums below
  const int32_t* b_colsum = nullptr;  // [N], contiguous; with a_zero only

  TCGEMM_HD bool per_block() const { return a.per_block() || b.per_block(); }
  TCGEMM_HD bool asymmetric() const { return a_zero.ptr != nullptr; }
};

// The rounding of the fp32 result to the output type (round to nearest even); fp32 on the CPU too.
template <class Out>
TCGEMM_HD Out from_float(float v);
template <>
TCGEMM_HD float from_float<float>(float v) { return v; }
#if defined(__CUDACC__)
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
#endif

// The OutType of an output element type.
template <class Out>
constexpr OutType out_type_of() {
  if constexpr (std::is_same_v<Out, __nv_bfloat16>) {
    return OutType::kBf16;
  } else if constexpr (std::is_same_v<Out, __half>) {
    return OutType::kFp16;
  } else {
    static_assert(std::is_same_v<Out, float>, "the scaled epilogue writes bf16, fp16 or fp32");
    return OutType::kFp32;
  }
}

// PerBlock: the main loop promotes per-block scales. Asymmetric: A has zero points (never with
// PerBlock); a separate functor so that the symmetric ones load and shuffle nothing more.
template <class Out, bool PerBlock, bool Asymmetric = false>
struct ScaledEpilogue {
  static_assert(!(PerBlock && Asymmetric), "zero points are applied to whole int32 sums, not per K block");
  using Params = ScaledEpilogueParams;
  using OutT = Out;
  using Acc = std::conditional_t<PerBlock, float, int32_t>;  // what the main loop hands over
  static constexpr bool kMixedSigns = false;  // int8 x int8 only
  static constexpr bool kAddsPartials = false;  // rounded once, after the whole K sum: no split-K
  static constexpr bool kPromotes = PerBlock;
  static constexpr bool kHasFinish = false;
  static constexpr bool kKernelQuantizesA = !Asymmetric;  // those kernels quantize A symmetrically
  Params p;

  static bool selects(const Params& s, OutType out) {
    return out == out_type_of<Out>() && s.per_block() == PerBlock && s.asymmetric() == Asymmetric;
  }

  // Per-block main loops promote K block kb of element (m, n) with a_block_scale(m, kb) *
  // b_block_scale(n, kb); a weight scale that does not depend on kb (per channel or per tensor)
  // is 1 there and waits for col(). With B's scales per 32 or 64 inputs (GemmProblem::
  // b_scale_groups), b_group_scale's index is the group's instead: kb * b_scale_groups + j.
  TCGEMM_HD float a_block_scale(int64_t m, int64_t kb) const { return p.a.at(m, kb); }
  TCGEMM_HD float b_block_scale(int64_t n, int64_t kb) const { return p.b.per_block() ? p.b.at(n, kb) : 1.0f; }
  // Scale `group` of column n of B's scales per 64 or 32 inputs, fp32, bf16 or fp16 (ScaleDtype);
  // of a 16-bit table also its bits as stored (HalfScaleBits decodes them). Kernels take an fp32
  // table's through b_block_scale.
  TCGEMM_HD float b_group_scale(int64_t n, int64_t group) const { return p.b.group_at(n, group); }
  TCGEMM_HD uint16_t b_group_scale_bits16(int64_t n, int64_t group) const { return p.b.group_bits16_at(n, group); }
  TCGEMM_HD ScaleDtype b_group_dtype() const { return p.b.dtype; }
  // The same as cursors over kb, for main loops that walk the K blocks of fixed rows and columns.
  TCGEMM_HD BlockScales a_block_scales(int64_t m) const { return BlockScales{p.a.row_ptr(m), p.a.stride_kb}; }
  TCGEMM_HD BlockScales b_block_scales(int64_t n) const {
    return p.b.per_block() ? BlockScales{p.b.row_ptr(n), p.b.stride_kb} : BlockScales{nullptr, 0};
  }

  // The same epilogue reading A's scales at `a_scales`, in the layout p.a describes: the skinny
  // kernel that quantizes A itself keeps them in shared memory (kernels/skinny/skinny_quantize.cuh).
  TCGEMM_HD ScaledEpilogue with_a_scales(const float* a_scales) const {
    ScaledEpilogue e = *this;
    e.p.a.ptr = a_scales;
    return e;
  }

  struct RowSym {
    float scale;  // sa(m), or 1 when the per-block main loop applied it
  };
  struct RowAsym {
    float scale;
    int32_t zero;  // za(m)
  };
  struct ColSym {
    float scale;  // sb(n), or 1 when the per-block main loop applied it
    float bias;
  };
  struct ColAsym {
    float scale;
    float bias;
    int32_t colsum;  // sum_k B[k, n]
  };
  using Row = std::conditional_t<Asymmetric, RowAsym, RowSym>;
  using Col = std::conditional_t<Asymmetric, ColAsym, ColSym>;

  // m and n must lie inside D (kernels clamp the indices of rows and columns they do not store).
  TCGEMM_HD Row row(int64_t m) const {
    const float scale = PerBlock ? 1.0f : p.a.at(m, 0);
    if constexpr (Asymmetric) {
      // A zero point outside the int8 range breaks the exactness argument above: its row is NaN
      // (the ops refuse such values on the CPU, where checking needs no synchronisation).
      const int32_t zero = p.a_zero.at(m);
      const bool valid = zero >= -128 && zero <= 127;
      return Row{valid ? scale : std::numeric_limits<float>::quiet_NaN(), zero};
    } else {
      return Row{scale};
    }
  }
  // Whether the main loop applies B's scales (per-block promotion): col() then carries 1.
  TCGEMM_HD bool b_scale_in_main_loop() const { return PerBlock && p.b.per_block(); }
  TCGEMM_HD void prefetch_col(int64_t n) const {
#if defined(__CUDA_ARCH__)
    if (!b_scale_in_main_loop()) ptx::prefetch_l2(p.b.row_ptr(n));
    if (p.bias != nullptr) ptx::prefetch_l2(p.bias + n);
    if constexpr (Asymmetric) ptx::prefetch_l2(p.b_colsum + n);
#endif
  }
  TCGEMM_HD Col col(int64_t n) const {
    const float scale = b_scale_in_main_loop() ? 1.0f : p.b.at(n, 0);
    const float bias = p.bias != nullptr ? p.bias[n] : 0.0f;
    if constexpr (Asymmetric) {
      return Col{scale, bias, p.b_colsum[n]};
    } else {
      return Col{scale, bias};
    }
  }

  // The fp32 result before conversion.
  TCGEMM_HD float value(Acc acc, Row r, Col c) const {
    if constexpr (PerBlock) {
      return acc * c.scale + c.bias;
    } else {
      if constexpr (Asymmetric) acc = wrap_sub(acc, wrap_mul(r.zero, c.colsum));
      // The two scales first: (acc * sa) * sb overflowed for huge activations (sa ~ 1e36)
      // against small weight scales, where the result is finite.
      return static_cast<float>(acc) * (r.scale * c.scale) + c.bias;
    }
  }

  TCGEMM_HD Out apply(Acc acc, Row r, Col c) const { return from_float<Out>(value(acc, r, c)); }
  TCGEMM_HD Out full(Acc acc, Row r, Col c, int64_t, int64_t) const { return apply(acc, r, c); }
  TCGEMM_HD bool needs_finish() const { return false; }
};

}  // namespace tcgemm

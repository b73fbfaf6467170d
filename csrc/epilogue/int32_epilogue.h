// The int32 epilogue every kernel applies to its accumulators, the CPU path included:
//   D[m, n] = alpha * (acc + row_offset[m] + col_offset[n]) + beta * C[m, n]
// with two's-complement wrap-around, so each backend returns the same bits modulo 2^32.
// The interface kernels call is described in epilogue/epilogues.h.
#pragma once

#include <cstdint>

#include "common/hd.h"
#include "common/math.h"
#include "common/problem.h"

namespace tcgemm {

// The offsets correct an operand whose sign bit a kernel flipped (see kernels/wmma); usually null.
struct Int32EpilogueParams {
  int32_t alpha = 1;
  int32_t beta = 0;
  const int32_t* c = nullptr;  // read only when beta != 0
  int64_t c_stride_m = 0;      // any strides, zero for broadcast views
  int64_t c_stride_n = 0;
  const int32_t* row_offset = nullptr;  // [M] or null
  const int32_t* col_offset = nullptr;  // [N] or null
};

struct Int32Epilogue {
  using Params = Int32EpilogueParams;
  using OutT = int32_t;
  using Acc = int32_t;
  static constexpr bool kMixedSigns = true;   // int8 and uint8 operands in any combination
  static constexpr bool kAddsPartials = true; // split-K: partial(sum) of every split adds onto epilogue(0)
  static constexpr bool kPromotes = false;    // no per-block scales
  static constexpr bool kHasFinish = true;    // offsets and beta * C: a second pass when needs_finish()
  static constexpr bool kKernelQuantizesA = false;  // A is int8 or uint8 as given
  Params p;

  static bool selects(const Params&, OutType out) { return out == OutType::kInt32; }

  // Nothing is loaded per row or column; apply() is the linear part, finish() the rest.
  struct Row {};
  struct Col {};
  TCGEMM_HD Row row(int64_t) const { return {}; }
  TCGEMM_HD Col col(int64_t) const { return {}; }
  TCGEMM_HD void prefetch_col(int64_t) const {}
  TCGEMM_HD int32_t apply(int32_t acc, Row, Col) const { return partial(acc); }
  TCGEMM_HD bool needs_finish() const { return p.row_offset != nullptr || p.col_offset != nullptr || p.beta != 0; }
  // The whole epilogue of one element (apply, then finish).
  TCGEMM_HD int32_t full(int32_t acc, Row, Col, int64_t m, int64_t n) const { return finish(partial(acc), m, n); }

  // The linear part: split-K adds partial(sum) of every split onto epilogue(0, m, n).
  TCGEMM_HD int32_t partial(int32_t acc) const { return wrap_mul(p.alpha, acc); }

  // The rest of the epilogue on an applied accumulator, using alpha*(acc + r + c) =
  // alpha*acc + alpha*r + alpha*c modulo 2^32.
  TCGEMM_HD int32_t finish(int32_t applied, int64_t m, int64_t n) const {
    if (p.row_offset != nullptr) applied = wrap_add(applied, partial(p.row_offset[m]));
    if (p.col_offset != nullptr) applied = wrap_add(applied, partial(p.col_offset[n]));
    if (p.beta != 0) applied = wrap_add(applied, wrap_mul(p.beta, p.c[m * p.c_stride_m + n * p.c_stride_n]));
    return applied;
  }

  TCGEMM_HD int32_t operator()(int32_t acc, int64_t m, int64_t n) const { return finish(partial(acc), m, n); }
};

}  // namespace tcgemm

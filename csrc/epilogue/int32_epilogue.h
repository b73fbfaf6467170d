// The int32 epilogue every kernel applies to its accumulators, the CPU path included:
//   D[m, n] = alpha * (acc + row_offset[m] + col_offset[n]) + beta * C[m, n]
// with two's-complement wrap-around, so each backend returns the same bits modulo 2^32.
#pragma once

#include <cstdint>

#include "common/gemm_params.h"
#include "common/hd.h"
#include "common/math.h"

namespace tcgemm {

struct Int32Epilogue {
  using OutT = int32_t;
  using Acc = int32_t;
  static constexpr bool kPerBlock = false;
  Int32EpilogueParams p;

  // The interface kernels share with ScaledEpilogue (epilogue/scaled_epilogue.h): nothing is
  // loaded per row or column; apply() is the linear part, finish() (when needs_finish()) the rest.
  struct Row {};
  struct Col {};
  TCGEMM_HD Row row(int64_t) const { return {}; }
  TCGEMM_HD Col col(int64_t) const { return {}; }
  TCGEMM_HD int32_t apply(int32_t acc, Row, Col) const { return scale(acc); }
  TCGEMM_HD bool needs_finish() const { return !plain(); }
  // The whole epilogue of one element (apply, then finish).
  TCGEMM_HD int32_t full(int32_t acc, Row, Col, int64_t m, int64_t n) const { return finish(scale(acc), m, n); }

  // The linear part: split-K adds scale(partial sum) of every split onto operator()(0, m, n).
  TCGEMM_HD int32_t scale(int32_t acc) const { return wrap_mul(p.alpha, acc); }

  // Whether D = scale(acc) already (no offsets, no C term): kernels may then skip finish().
  TCGEMM_HD bool plain() const { return p.row_offset == nullptr && p.col_offset == nullptr && p.beta == 0; }

  // The rest of the epilogue on an already scaled accumulator, using alpha*(acc + r + c) =
  // alpha*acc + alpha*r + alpha*c modulo 2^32.
  TCGEMM_HD int32_t finish(int32_t scaled, int64_t m, int64_t n) const {
    if (p.row_offset != nullptr) scaled = wrap_add(scaled, scale(p.row_offset[m]));
    if (p.col_offset != nullptr) scaled = wrap_add(scaled, scale(p.col_offset[n]));
    if (p.beta != 0) scaled = wrap_add(scaled, wrap_mul(p.beta, p.c[m * p.c_stride_m + n * p.c_stride_n]));
    return scaled;
  }

  TCGEMM_HD int32_t operator()(int32_t acc, int64_t m, int64_t n) const { return finish(scale(acc), m, n); }
};

}  // namespace tcgemm

// The plain description of one int32 GEMM that the binding layer hands to dispatch and kernels.
// Nothing here depends on torch, so kernels and their launchers build against CUDA alone.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/hd.h"

namespace tcgemm {

// One int8/uint8 operand seen as a [rows, K] matrix: A is [M, K]; B enters as its transpose [N, K].
// "K-major" (stride_k == 1) is the layout every tensor-core instruction wants in registers:
// A row-major, B column-major (the nn.Linear weight [N, K] passed as w.t()).
struct Operand {
  const void* ptr = nullptr;
  int64_t stride_row = 0;  // elements between consecutive rows (M for A, N for B)
  int64_t stride_k = 0;    // elements between consecutive K indices
  bool is_signed = true;   // int8 when true, uint8 otherwise

  TCGEMM_HD bool k_major() const { return stride_k == 1; }
  TCGEMM_HD bool rows_contiguous() const { return stride_row == 1 && !k_major(); }  // M- (or N-) major
};

// D = alpha * (A @ B + row_offset[m] + col_offset[n]) + beta * C, in int32 arithmetic that wraps.
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

// The element type of D: int32 for the exact GEMM, a float type for the scaled GEMM.
enum class OutType { kInt32, kBf16, kFp16, kFp32 };

// Scales of the scaled GEMM (epilogue/scaled_epilogue.h), fp32, addressed by strides so one
// description covers every granularity (a zero stride broadcasts):
//   sa(m, kb) = scale_a[m * sa_stride_m + kb * sa_stride_kb]
//   sb(n, kb) = scale_b[(n >> sb_n_shift) * sb_stride_n + kb * sb_stride_kb]
// with kb the 128-wide K block. Per-tensor / per-token / per-channel: both kb strides are zero;
// per-block: sa [M, KB] (1x128) and sb [ceil(N/128), KB] (128x128, shift 7) or [N, KB] (shift 0).
struct ScaledEpilogueParams {
  const float* scale_a = nullptr;
  int64_t sa_stride_m = 0, sa_stride_kb = 0;
  const float* scale_b = nullptr;
  int64_t sb_stride_n = 0, sb_stride_kb = 0;
  int sb_n_shift = 0;          // 0, or 7 when one scale covers 128 columns
  const float* bias = nullptr;  // [N] fp32, or null

  TCGEMM_HD bool per_block() const { return sa_stride_kb != 0 || sb_stride_kb != 0; }
};

struct GemmParams {
  int m = 0, n = 0, k = 0;
  Operand a;                 // [M, K]
  Operand b;                 // B^T, [N, K]
  int32_t* d = nullptr;      // [M, N], unit stride along N (int32 GEMM; null for the scaled GEMM)
  int64_t ldd = 0;           // elements between rows of D (either GEMM)
  Int32EpilogueParams epilogue;
  // The scaled GEMM: D = convert(sum_kb acc_kb * sa * sb + bias) of type out_type, written to
  // `out` (unit stride along N, ldd between rows). Both operands are int8 (signed).
  OutType out_type = OutType::kInt32;
  void* out = nullptr;
  ScaledEpilogueParams scaled;
  // Split-K (int32 only; set by dispatch): K is cut into split_k ranges of whole slices, one per
  // blockIdx.y, each adding its scaled partial sum with wrapping atomics onto D, which dispatch
  // first fills with epilogue(0) (epilogue/int32_epilogue_fill.h).
  int split_k = 1;
  cudaStream_t stream = nullptr;
};

}  // namespace tcgemm

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

struct GemmParams {
  int m = 0, n = 0, k = 0;
  Operand a;                 // [M, K]
  Operand b;                 // B^T, [N, K]
  int32_t* d = nullptr;      // [M, N], unit stride along N
  int64_t ldd = 0;           // elements between rows of D
  Int32EpilogueParams epilogue;
  // Split-K (sm80, set by dispatch): K is cut into split_k ranges of whole slices, one per
  // blockIdx.y, each adding its scaled partial sum with wrapping atomics onto D, which dispatch
  // first fills with epilogue(0) (epilogue/int32_epilogue_fill.h).
  int split_k = 1;
  cudaStream_t stream = nullptr;
};

}  // namespace tcgemm

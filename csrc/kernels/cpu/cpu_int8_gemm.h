// The plain C++ path: the same numbers as the GPU kernels (int32 wrap-around, shared epilogue).
#pragma once

#include <cstdint>

#include "common/gemm_params.h"

namespace tcgemm::cpu {

// Computes rows [m_begin, m_end) of D. Both operands must be K-major (stride_k == 1).
void int8_gemm_rows(const GemmParams& p, int64_t m_begin, int64_t m_end);

// The scaled GEMM (int8 x int8, p.scaled) into fp32 `out` (p.ldd between rows), rows
// [m_begin, m_end): the same fp32 arithmetic as the GPU kernels (epilogue/scaled_epilogue.h);
// the caller rounds to the output dtype.
void scaled_gemm_rows(const GemmParams& p, float* out, int64_t m_begin, int64_t m_end);

}  // namespace tcgemm::cpu

// The plain C++ path: the same numbers as the GPU kernels (int32 wrap-around, the shared
// epilogue functors, per-block promotion in fp32).
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "epilogue/epilogues.h"

namespace tcgemm::cpu {

// Computes rows [m_begin, m_end) of D. Both operands must be K-major (stride_k == 1). The scaled
// epilogue writes fp32 here (p.d.type == kFp32); the caller rounds to the output dtype.
void gemm_rows(const GemmProblem& p, const EpilogueArgs& epilogue, int64_t m_begin, int64_t m_end);

}  // namespace tcgemm::cpu

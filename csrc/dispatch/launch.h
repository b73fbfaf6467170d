// The launch table: (backend, epilogue) -> the family's plan and launcher.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "dispatch/backends.h"
#include "epilogue/epilogues.h"

namespace tcgemm {

// Launches the GEMM on p.stream with a resolved GPU backend. p.k may be 0 for the int32
// epilogue (D = epilogue(0)). The caller has validated shapes, layouts and offsets.
void run_gpu(Backend b, const GemmProblem& p, const EpilogueArgs& epilogue, const DeviceInfo& dev);

// The plain C++ path for rows [m_begin, m_end) of D; both operands K-major. The scaled epilogue
// writes fp32 (p.d.type == kFp32), which the caller rounds to the output dtype.
void run_cpu(const GemmProblem& p, const EpilogueArgs& epilogue, int64_t m_begin, int64_t m_end);

}  // namespace tcgemm

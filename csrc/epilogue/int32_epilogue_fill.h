// D = epilogue(0): what D holds when A @ B contributes nothing (K = 0), and the starting value
// onto which split-K blocks add their scaled partial sums.
#pragma once

#include "common/gemm_params.h"

namespace tcgemm {

// Writes epilogue(0, m, n) to every element of D on p.stream.
void launch_epilogue_fill(const GemmParams& p);

}  // namespace tcgemm

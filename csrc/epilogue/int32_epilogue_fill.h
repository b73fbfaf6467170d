// D = epilogue(0): what D holds when A @ B contributes nothing (K = 0), and the starting value
// onto which split-K blocks add their partial sums.
#pragma once

#include "common/problem.h"
#include "epilogue/int32_epilogue.h"

namespace tcgemm {

// Writes epilogue(0, m, n) to every element of p.d (int32) on p.stream.
void launch_epilogue_fill(const GemmProblem& p, const Int32EpilogueParams& epilogue);

}  // namespace tcgemm

// Host-side interface of the skinny-M kernel (mma.sync, sm_80+): D for a few rows of A against a
// wide B, streaming B from global memory straight into registers. The launchers are instantiated
// per tile config (configs.h) in skinny_<config>.cu for every epilogue.
#pragma once

#include "common/problem.h"

namespace tcgemm::skinny {

// Needs both operands K-major with a 16-byte aligned base (and row stride when they have more
// than one row); any M, N, K >= 1; no split-K.
template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi);

}  // namespace tcgemm::skinny

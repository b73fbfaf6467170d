// Host-side interface of the mma.sync kernel (sm80_gemm.cuh); the launchers are instantiated per
// tile config (configs.h) in sm80_<config>.cu for every epilogue it serves.
#pragma once

#include "common/problem.h"

namespace tcgemm::sm80 {

// Needs both operands K-major with 16-byte aligned base and row stride; M, N, K are free. With
// an epilogue that adds partials and a SplitK config, p.split_k > 1 runs that many K ranges
// (blockIdx.y) adding into D, prefilled with epilogue(0) by the caller.
template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi);

}  // namespace tcgemm::sm80

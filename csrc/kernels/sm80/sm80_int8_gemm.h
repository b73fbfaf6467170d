// Host-side interface of the mma.sync kernel; instantiated per tile config in sm80_int8_gemm_*.cu.
#pragma once

#include "common/gemm_params.h"

namespace tcgemm::sm80 {

// Needs both operands K-major with 16-byte aligned base and row stride; M, N, K are free.
template <class Cfg>
void launch_sm80_int8_gemm(const GemmParams& p);

// The scaled GEMM (p.out, p.out_type, p.scaled; int8 x int8, no split-K). PerBlock when a scale
// depends on the K block (p.scaled.per_block()).
template <class Cfg, bool PerBlock>
void launch_sm80_scaled_gemm(const GemmParams& p);

}  // namespace tcgemm::sm80

// Host-side interface of the skinny-M kernel (mma.sync, sm_80+): D for a few rows of A against a
// wide B, streaming B from global memory straight into registers. Instantiated in skinny_gemm_*.cu.
#pragma once

#include "common/gemm_params.h"

namespace tcgemm::skinny {

// Needs both operands K-major with a 16-byte aligned base (and row stride when they have more
// than one row); any M, N, K >= 1. RowTiles m16 tiles of rows per block (1 or 2).
template <int RowTiles>
void launch_skinny_int8_gemm(const GemmParams& p);

// The scaled GEMM (int8 x int8, any scale granularity, p.scaled.per_block() picks promotion).
template <int RowTiles>
void launch_skinny_scaled_gemm(const GemmParams& p);

}  // namespace tcgemm::skinny

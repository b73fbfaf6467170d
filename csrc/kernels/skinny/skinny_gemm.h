// Host-side interface of the skinny-M kernel (mma.sync, sm_80+): D for a few rows of A against a
// wide B, streaming B from global memory straight into registers. Instantiated in skinny_gemm_*.cu.
#pragma once

#include "common/gemm_params.h"

namespace tcgemm::skinny {

// Needs both operands K-major with a 16-byte aligned base (and row stride when they have more
// than one row); any M, N, K >= 1. A block computes RowTiles m16 tiles of rows by ColTiles n8
// tiles of columns; instantiated for (1, 2), (1, 4) and (2, 2) (dispatch/heuristics.h picks).
template <int RowTiles, int ColTiles>
void launch_skinny_int8_gemm(const GemmParams& p);

// The scaled GEMM (int8 x int8, any scale granularity, p.scaled.per_block() picks promotion).
template <int RowTiles, int ColTiles>
void launch_skinny_scaled_gemm(const GemmParams& p);

}  // namespace tcgemm::skinny

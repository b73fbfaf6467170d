// Host-side interface of the Hopper wgmma + TMA kernel (sm90_gemm.cuh); the launchers are
// instantiated per tile config (configs.h) in sm90_<config>.cu for every epilogue it serves.
#pragma once

#include "common/problem.h"

namespace tcgemm::sm90 {

// Whether this build carries sm_90a machine code for the kernel and the current device (compute
// capability 9.0) can run it. Kernels compiled from PTX for another target would be empty.
bool kernel_available();

// Needs both operands TMA-describable (sm90_tensor_map.h: tma_describable); M, N, K >= 1 free.
// With an epilogue that adds partials, p.split_k > 1 splits K into that many ranges of whole
// 128-byte blocks that add into D (prefilled with epilogue(0) by the caller). A promoting
// epilogue needs a config with kSupportsPerBlock, and weight scales that do not depend on the K
// block or cover 128 columns each unless the config has kColumnFactors. A packed 4-bit B
// (p.b_int4, two-level or unscaled) needs a config with kBInt4 and its bytes TMA-describable
// (sm90_tensor_map.h: packed_tma_describable). Grid: at most sm_count blocks.
template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count);

}  // namespace tcgemm::sm90

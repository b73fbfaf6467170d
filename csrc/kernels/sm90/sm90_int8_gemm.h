// Host-side interface of the Hopper wgmma + TMA kernel; instantiated per tile config in
// sm90_int8_gemm_*.cu.
#pragma once

#include "common/gemm_params.h"

namespace tcgemm::sm90 {

// Whether this build carries sm_90a machine code for the kernel and the current device (compute
// capability 9.0) can run it. Kernels compiled from PTX for another target would be empty.
bool kernel_available();

// Needs both operands TMA-describable (sm90_tensor_map.h: tma_describable); M, N, K >= 1 free.
// p.split_k > 1 splits K into that many ranges of whole 128-byte blocks that add into D with
// wrapping atomics (D prefilled with epilogue(0) by the caller). Grid: at most sm_count blocks.
template <class Cfg>
void launch_sm90_int8_gemm(const GemmParams& p, int sm_count);

// The scaled GEMM (p.out, p.out_type, p.scaled; int8 x int8, no split-K): PerBlock when a
// scale depends on the K block (p.scaled.per_block()); then p.scaled.sb_n_shift must be 7 or
// scale_b must not depend on kb (Cfg::kSupportsPerBlock configs only).
template <class Cfg, bool PerBlock>
void launch_sm90_scaled_gemm(const GemmParams& p, int sm_count);

}  // namespace tcgemm::sm90

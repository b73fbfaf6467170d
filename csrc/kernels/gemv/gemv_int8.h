// The int8 GEMV: one row of int8 A against an int8 weight as a warp-per-row dot product on the
// CUDA cores (dp4a) instead of mma. Every warp streams whole rows of B with 16-byte loads, eight in
// flight per lane, against A's row held in shared memory (gemv_int8.cuh). At one row an mma
// kernel uses a sixteenth of each tensor-core instruction and spends its time on fragment
// bookkeeping; the GEMV's only job is to keep B's stream full (docs/design/gemv.md).
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace tcgemm::gemv {

constexpr int kUnroll = 8;        // 16-byte loads in flight per lane: 32 x 8 x 16 = 4 KiB of a row per warp
constexpr int kWarps = 8;         // warps per block
constexpr int kBlocksPerSm = 4;
constexpr int kMaxK = 32768;      // A's row in shared memory

// Whether the kernel reads B (N x K, K-major, signed int8, not packed 4-bit): a 16-byte aligned
// base, rows a multiple of 16 bytes apart, K a multiple of 16 up to kMaxK.
inline bool fits_b(const Operand& b, int k, bool b_int4) {
  return !b_int4 && b.is_signed && b.k_major() && reinterpret_cast<uintptr_t>(b.ptr) % 16 == 0 &&
         b.stride_row % 16 == 0 && k % 16 == 0 && k <= kMaxK;
}

// Whether the kernel takes p: fits_b, one row of signed int8 A with a 16-byte aligned base, no
// split-K.
inline bool fits(const GemmProblem& p) {
  return p.m == 1 && p.split_k == 1 && p.a.is_signed && p.a.k_major() &&
         reinterpret_cast<uintptr_t>(p.a.ptr) % 16 == 0 && fits_b(p.b, p.k, p.b_int4);
}

// D = epilogue(A B) for p on p.stream (every epilogue but per-block scales, which promote per K
// block: the GEMV sums all of K at once).
template <class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count);

}  // namespace tcgemm::gemv

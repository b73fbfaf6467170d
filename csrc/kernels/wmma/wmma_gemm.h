// Host-side interface of the WMMA kernels (wmma_gemm.cuh; launchers in wmma_gemm.cu).
#pragma once

#include <cstdint>

#include "common/problem.h"

namespace tcgemm::wmma_gemm {

// WMMA cannot mix int8 and uint8: the uint8 operand of a mixed pair is staged with its sign bit
// flipped (u - 128) and the epilogue adds 128 * (sums of the other operand) back.
enum class SignFlip { kNone, kFlipA, kFlipB };

inline SignFlip sign_flip_for(bool a_signed, bool b_signed) {
  if (a_signed == b_signed) return SignFlip::kNone;
  return a_signed ? SignFlip::kFlipB : SignFlip::kFlipA;
}

constexpr uint32_t kFlipMask = 0x80808080u;

// The tiled kernel (configs.h). Each operand must be K-major or rows-contiguous with a 16-byte
// aligned base and leading dimension. Epilogues of the int32 family only (Config::kEpilogues):
// the correction of a flipped operand is an offset of the int32 epilogue.
template <class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count);

// The one-warp-per-tile fallback for devices that cannot give the tiled kernel its shared
// memory; any strides.
template <class Epi>
void launch_simple(const GemmProblem& p, const Epi& epi, int sm_count);

}  // namespace tcgemm::wmma_gemm

// Host-side interface of the WMMA kernels (definitions in wmma_int8_gemm.cu).
#pragma once

#include <cstdint>

#include "common/gemm_params.h"

namespace tcgemm::wmma_gemm {

// WMMA cannot mix int8 and uint8: the uint8 operand of a mixed pair is staged with its sign bit
// flipped (u - 128) and the epilogue adds 128 * (sums of the other operand) back.
enum class SignFlip { kNone, kFlipA, kFlipB };

inline SignFlip sign_flip_for(bool a_signed, bool b_signed) {
  if (a_signed == b_signed) return SignFlip::kNone;
  return a_signed ? SignFlip::kFlipB : SignFlip::kFlipA;
}

constexpr uint32_t kFlipMask = 0x80808080u;

// The tiled kernel (WmmaConfig, dispatch/heuristics.h). Each operand must be K-major or
// rows-contiguous with a 16-byte aligned base and leading dimension.
void launch_wmma_int8_gemm(const GemmParams& p, int sm_count);

// The one-warp-per-tile fallback for devices that cannot give the tiled kernel its shared
// memory; any strides.
void launch_wmma_int8_gemm_simple(const GemmParams& p, int sm_count);

}  // namespace tcgemm::wmma_gemm

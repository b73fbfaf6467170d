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

// The tiled kernel when the device gives it its shared memory (and !force_simple), else the
// one-warp-per-tile fallback. The tiled kernel needs each operand K-major or row-major with a
// 16-byte aligned base and leading dimension; the fallback takes any strides.
void launch_wmma_int8_gemm(const GemmParams& p, int sm_count, int smem_optin, bool force_simple);

}  // namespace tcgemm::wmma_gemm

#include <algorithm>

#include "dispatch/heuristics.h"
#include "kernels/wmma/wmma_int8_gemm.cuh"

namespace tcgemm::wmma_gemm {
namespace {

template <typename T>
void launch_simple(const GemmParams& p, int sm_count, uint32_t flip_a, uint32_t flip_b) {
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, 16)) * ceil_div(p.n, 16);
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(tiles, kSimpleWarps), int64_t{sm_count} * 8);
  wmma_int8_gemm_simple_kernel<T><<<static_cast<unsigned>(blocks), 32 * kSimpleWarps, 0, p.stream>>>(p, flip_a, flip_b);
  TCGEMM_CHECK_LAUNCH();
}

template <class Cfg, typename T, bool AKMajor, bool BKMajor>
void launch_tiled(const GemmParams& p, int sm_count, uint32_t flip_a, uint32_t flip_b) {
  auto kernel = wmma_int8_gemm_kernel<Cfg, T, AKMajor, BKMajor>;
  if constexpr (Cfg::kSmemBytes > 48 * 1024) {
    TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  }
  int per_sm = 0;
  TCGEMM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, Cfg::kSmemBytes));
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, Cfg::kBM)) * ceil_div(p.n, Cfg::kBN);
  const int64_t blocks = std::min<int64_t>(tiles, int64_t{sm_count} * std::max(per_sm, 1));
  kernel<<<static_cast<unsigned>(blocks), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(p, flip_a, flip_b);
  TCGEMM_CHECK_LAUNCH();
}

template <class Cfg, typename T>
void launch_tiled_layout(const GemmParams& p, int sm_count, uint32_t flip_a, uint32_t flip_b) {
  const bool ak = p.a.k_major(), bk = p.b.k_major();
  if (ak && bk) return launch_tiled<Cfg, T, true, true>(p, sm_count, flip_a, flip_b);
  if (ak) return launch_tiled<Cfg, T, true, false>(p, sm_count, flip_a, flip_b);
  if (bk) return launch_tiled<Cfg, T, false, true>(p, sm_count, flip_a, flip_b);
  return launch_tiled<Cfg, T, false, false>(p, sm_count, flip_a, flip_b);
}

// A mixed int8/uint8 pair runs as int8 x int8 with the uint8 operand's sign bit flipped.
struct FlipMasks {
  uint32_t a, b;
  bool as_signed;
};

FlipMasks flip_masks(const GemmParams& p) {
  const SignFlip flip = sign_flip_for(p.a.is_signed, p.b.is_signed);
  return {flip == SignFlip::kFlipA ? kFlipMask : 0u, flip == SignFlip::kFlipB ? kFlipMask : 0u,
          p.a.is_signed || p.b.is_signed};
}

}  // namespace

void launch_wmma_int8_gemm(const GemmParams& p, int sm_count) {
  const FlipMasks f = flip_masks(p);
  if (f.as_signed) return launch_tiled_layout<WmmaConfig, signed char>(p, sm_count, f.a, f.b);
  launch_tiled_layout<WmmaConfig, unsigned char>(p, sm_count, f.a, f.b);
}

void launch_wmma_int8_gemm_simple(const GemmParams& p, int sm_count) {
  const FlipMasks f = flip_masks(p);
  if (f.as_signed) return launch_simple<signed char>(p, sm_count, f.a, f.b);
  launch_simple<unsigned char>(p, sm_count, f.a, f.b);
}

}  // namespace tcgemm::wmma_gemm

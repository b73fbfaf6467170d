#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "common/launch_kernel.cuh"
#include "kernels/wmma/wmma_gemm.cuh"

namespace tcgemm::wmma_gemm {
namespace {

template <typename T, class Epi>
void launch_simple_kernel(const GemmProblem& p, const Epi& epi, int sm_count, uint32_t flip_a, uint32_t flip_b) {
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, 16)) * ceil_div(p.n, 16);
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(tiles, kSimpleWarps), int64_t{sm_count} * 8);
  wmma_gemm_simple_kernel<T, Epi><<<static_cast<unsigned>(blocks), 32 * kSimpleWarps, 0, p.stream>>>(p, epi, flip_a,
                                                                                            flip_b);
  TCGEMM_CHECK_LAUNCH();
}

template <class Cfg, typename T, bool AKMajor, bool BKMajor, class Epi>
void launch_tiled(const GemmProblem& p, const Epi& epi, int sm_count, uint32_t flip_a, uint32_t flip_b) {
  constexpr auto kernel = wmma_gemm_kernel<Cfg, T, AKMajor, BKMajor, Epi>;
  if constexpr (Cfg::kSmemBytes > 48 * 1024) allow_dynamic_smem<kernel, Cfg::kSmemBytes>();
  int per_sm = 0;
  TCGEMM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, Cfg::kSmemBytes));
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, Cfg::kBM)) * ceil_div(p.n, Cfg::kBN);
  const int64_t blocks = std::min<int64_t>(tiles, int64_t{sm_count} * std::max(per_sm, 1));
  kernel<<<static_cast<unsigned>(blocks), Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(p, epi, flip_a, flip_b);
  TCGEMM_CHECK_LAUNCH();
}

template <class Cfg, typename T, class Epi>
void launch_tiled_layout(const GemmProblem& p, const Epi& epi, int sm_count, uint32_t flip_a, uint32_t flip_b) {
  const bool ak = p.a.k_major(), bk = p.b.k_major();
  if (ak && bk) return launch_tiled<Cfg, T, true, true>(p, epi, sm_count, flip_a, flip_b);
  if (ak) return launch_tiled<Cfg, T, true, false>(p, epi, sm_count, flip_a, flip_b);
  if (bk) return launch_tiled<Cfg, T, false, true>(p, epi, sm_count, flip_a, flip_b);
  return launch_tiled<Cfg, T, false, false>(p, epi, sm_count, flip_a, flip_b);
}

// A mixed int8/uint8 pair runs as int8 x int8 with the uint8 operand's sign bit flipped.
struct FlipMasks {
  uint32_t a, b;
  bool as_signed;
};

FlipMasks flip_masks(const GemmProblem& p) {
  const SignFlip flip = sign_flip_for(p.a.is_signed, p.b.is_signed);
  return {flip == SignFlip::kFlipA ? kFlipMask : 0u, flip == SignFlip::kFlipB ? kFlipMask : 0u,
          p.a.is_signed || p.b.is_signed};
}

}  // namespace

// Runs run(T, flip_a, flip_b) with the element type and flips of the problem's signedness; the
// WMMA kernels take the int32 epilogue only.
template <class Epi, class Run>
void with_element_type(const GemmProblem& p, const Run& run) {
  if constexpr (!config_serves<Config, Epi>()) {
    throw std::logic_error("tcgemm: the WMMA kernels run the int32 epilogue only");
  } else {
    const FlipMasks f = flip_masks(p);
    if (f.as_signed) return run(static_cast<signed char*>(nullptr), f.a, f.b);
    run(static_cast<unsigned char*>(nullptr), f.a, f.b);
  }
}

template <class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count) {
  with_element_type<Epi>(p, [&](auto* tag, uint32_t flip_a, uint32_t flip_b) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch_tiled_layout<Config, T>(p, epi, sm_count, flip_a, flip_b);
  });
}

template <class Epi>
void launch_simple(const GemmProblem& p, const Epi& epi, int sm_count) {
  with_element_type<Epi>(p, [&](auto* tag, uint32_t flip_a, uint32_t flip_b) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch_simple_kernel<T>(p, epi, sm_count, flip_a, flip_b);
  });
}

#define TCGEMM_WMMA_INSTANTIATE_ONE(Epi, Unused)                                    \
  template void launch<Epi>(const GemmProblem&, const Epi&, int);                  \
  template void launch_simple<Epi>(const GemmProblem&, const Epi&, int);
TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_WMMA_INSTANTIATE_ONE, )

}  // namespace tcgemm::wmma_gemm

// The int8 GEMV (gemv_int8.h). A block of kWarps warps copies A's row
// into shared memory, then each warp takes rows n = warp, warp + all warps, ... of B: per row,
// lane l loads bytes 16 (32 u + l) of each 512-byte piece u of K (kUnroll pieces in flight), adds
// four dp4a per 16 bytes against the same bytes of A, and the warp's sums meet by shuffles; lane 0
// applies the epilogue. The first row's loads of B go out before griddep_wait (an overlapped
// launch after the kernel that quantizes A).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "common/cuda_check.h"
#include "common/launch_kernel.cuh"
#include "common/math.h"
#include "epilogue/epilogues.h"
#include "kernels/gemv/gemv_int8.h"
#include "kernels/quantize/quantize_vec.cuh"
#include "ptx/cache_policy.cuh"
#include "ptx/griddep.cuh"
#include "ptx/ld_global.cuh"

namespace tcgemm::gemv {

struct Params {
  int n, k;
  const int8_t* a;
  const int8_t* b;
  int64_t ldb;
  void* d;
};

// One piece of kUnroll x 512 bytes of row `row` from K offset k0, lane `lane`'s 16-byte parts
// (zero past K).
__device__ __forceinline__ void load_piece(uint4 (&w)[kUnroll], const int8_t* row, int k0, int k, int lane,
                                           uint64_t policy) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int at = k0 + 16 * (32 * u + lane);
    w[u] = at < k ? ptx::ld_global_stream_v4(row + at, policy) : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ int32_t dot_piece(const uint4 (&w)[kUnroll], const int8_t* a_smem, int k0, int k,
                                             int lane, int32_t acc) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int at = k0 + 16 * (32 * u + lane);
    if (at < k) {
      const int4 x = *reinterpret_cast<const int4*>(a_smem + at);
      acc = __dp4a(static_cast<int>(w[u].x), x.x, acc);
      acc = __dp4a(static_cast<int>(w[u].y), x.y, acc);
      acc = __dp4a(static_cast<int>(w[u].z), x.z, acc);
      acc = __dp4a(static_cast<int>(w[u].w), x.w, acc);
    }
  }
  return acc;
}

template <class Epi>
__global__ void __launch_bounds__(32 * kWarps, kBlocksPerSm) gemv_int8_kernel(const Params args, const Epi epi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // L2 cache hints; dispatched on sm_90 (plan.h use_gemv)
  extern __shared__ int4 a_smem_raw[];
  const int8_t* a_smem = reinterpret_cast<const int8_t*>(a_smem_raw);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = gridDim.x * kWarps;
  const uint64_t stream = ptx::l2_policy_evict_first();
  int n = blockIdx.x * kWarps + warp;
  uint4 w[kUnroll];
  if (n < args.n) load_piece(w, args.b + n * args.ldb, 0, args.k, lane, stream);  // B is no kernel's output
  ptx::griddep_wait();  // A, its scale and D belong to the kernels before this one
  for (int at = 16 * threadIdx.x; at < args.k; at += 16 * 32 * kWarps)
    *reinterpret_cast<int4*>(reinterpret_cast<int8_t*>(a_smem_raw) + at) = *reinterpret_cast<const int4*>(args.a + at);
  __syncthreads();
  const auto row_terms = epi.row(0);
  using Out = typename Epi::OutT;
  Out* d = static_cast<Out*>(args.d);
  constexpr int kPiece = 16 * 32 * kUnroll;
  for (; n < args.n; n += warps) {
    const int8_t* row = args.b + n * args.ldb;
    int32_t acc = dot_piece(w, a_smem, 0, args.k, lane, 0);
    for (int k0 = kPiece; k0 < args.k; k0 += kPiece) {
      load_piece(w, row, k0, args.k, lane, stream);
      acc = dot_piece(w, a_smem, k0, args.k, lane, acc);
    }
    const int next = n + warps;
    if (next < args.n) load_piece(w, args.b + next * args.ldb, 0, args.k, lane, stream);
    acc = quant::warp_sum(acc);
    if (lane == 0) d[n] = epi.full(acc, row_terms, epi.col(n), 0, n);
  }
  ptx::griddep_launch_dependents();
#endif
}

template <class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count) {
  if constexpr (Epi::kPromotes) {
    throw std::logic_error("tcgemm: the GEMV sums all of K at once: no per-block scales");
  } else {
    if (!fits(p)) throw std::logic_error("tcgemm: the GEMV got a problem it does not take (gemv::fits)");
    Params args{p.n, p.k, static_cast<const int8_t*>(p.a.ptr), static_cast<const int8_t*>(p.b.ptr), p.b.stride_row,
                p.d.ptr};
    constexpr auto kernel = gemv_int8_kernel<Epi>;
    allow_dynamic_smem<kernel, kMaxK>();
    const int blocks =
        static_cast<int>(std::min<int64_t>(ceil_div<int64_t>(p.n, kWarps), int64_t{sm_count} * kBlocksPerSm));
    launch_kernel(kernel, dim3(blocks), dim3(32 * kWarps), static_cast<size_t>(p.k), p.stream, p.pdl, args, epi);
  }
}

}  // namespace tcgemm::gemv

#define TCGEMM_GEMV_INSTANTIATE_ONE(Epi, Unused) \
  template void tcgemm::gemv::launch<Epi>(const tcgemm::GemmProblem&, const Epi&, int);

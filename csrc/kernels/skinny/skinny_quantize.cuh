// The skinny kernel's own activation quantization (tcgemm.quant_linear at a few rows): each block
// quantizes all M rows of the float input x into shared memory before its main loop, per token,
// per 1x128 group or with a static per-tensor scale, and its epilogue reads the scales from there. One kernel per layer instead of a
// quantize kernel and a GEMM (docs/design/decode.md, "One kernel at a few rows").
//
// The bits are tcgemm.quantize's: the same per-vector pieces (kernels/quantize/quantize_vec.cuh)
// and scalar rules (common/quantize_params.h), and a max does not depend on the order in which the
// block's threads fold it. Every block repeats the work (M * K values over 256 threads), which is
// why the route caps M * K (kQuantizeVecs vectors per thread); the kernel is then persistent, so
// that each block does it once. One token against a 4-bit weight whose tiles split K between
// cluster blocks is the exception: each block quantizes the part of the row its warps read
// (XShare, configs.h), so that row may be twice as long.
#pragma once

#include <cstdint>

#include "common/math.h"
#include "common/quantize_params.h"
#include "common/scale_layout.h"
#include "kernels/quantize/quantize_vec.cuh"
#include "kernels/skinny/configs.h"
#include "ptx/cluster.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/minmax.cuh"

namespace tcgemm::skinny {

// The shared-memory layout: M rows of int8, each K rounded up to whole K blocks (the bytes past K
// zero) plus 16 bytes, so that consecutive rows start 4 banks apart; then the scales, contiguous
// as tcgemm.quantize returns them ([M, 1] per token, [M, ceil(K/128)] per group).
struct QuantizedA {
  int row_stride;  // bytes
  int scales_at;   // byte offset of the scales
  int bytes;       // in all

  TCGEMM_HD static QuantizedA layout(int m, int k, QuantGranularity g) {
    QuantizedA s;
    s.row_stride = round_up(k, kBK) + 16;
    s.scales_at = m * s.row_stride;
    const int scales = g == QuantGranularity::kGroup ? m * static_cast<int>(scale_blocks(k)) : m;
    s.bytes = s.scales_at + 4 * scales;
    return s;
  }
};

// What a kernel that quantizes x in the block is compiled for: x's element type T and whether x is
// one row quantized per token (OneToken: batch-1 decode, the case that matters most). Every block
// runs the quantization once, from code fetched cold into each SM's instruction cache, so the
// one-row kernel carries only that path. H200, 2026-11-26, bench_decode M = 1, two runs of each
// build, against the kernel with every row count and granularity: W4A8 8B o 6.8 -> 6.2 us, qkv
// 8.5 -> 7.8, k/v 5.3 -> 4.9, gate+up 22.4 -> 21.4, 70B o 13.9 -> 13.4; W8A8 8B o 8.3 -> 7.7
// (docs/design/int4.md). One runtime path for every row count instead ran more instructions once
// and was slower (W4A8 8B o 7.7 us). InParts (one token, packed 4-bit B whose tiles split K
// between cluster blocks, a row longer than one block holds: XShare::of): each block quantizes
// the part of the row its warps read. A build of its own: as a run-time choice in the one-row
// kernel, the other layers' set-up lost about 2% (H200, bench_decode M = 1: 8B o 5.72 -> 5.85 us,
// qkv 6.47 -> 6.55, k / v 4.76 -> 4.85).
template <typename T, bool OneToken, bool InParts = false>
struct XQuant {
  static_assert(OneToken || !InParts, "x in parts is one token");
  using Elem = T;
  static constexpr bool kOneToken = OneToken, kInParts = InParts;
};

#if defined(__CUDACC__)
namespace quantize_in_block {

using namespace quant;  // NOLINT: the shared per-vector pieces

template <typename T>
constexpr int kVec = 16 / sizeof(T);

template <typename T>
__device__ __forceinline__ const T* x_at(const QuantizeParams& q, int r, int col) {
  return static_cast<const T*>(q.x) + static_cast<int64_t>(r) * q.x_stride_row + col;
}

__device__ __forceinline__ int8_t* q_at(uint8_t* smem, const QuantizedA& s, int r, int col) {
  return reinterpret_cast<int8_t*>(smem + r * s.row_stride) + col;
}

// The values of a loaded vector at column col, times the SmoothQuant multipliers if any.
template <typename T>
__device__ __forceinline__ void values(const QuantizeParams& q, const RawVec<T, kVec<T>>& raw, int col,
                                       float (&v)[kVec<T>]) {
  to_floats(raw, v);
  if (q.channel_mul != nullptr) apply_channel_mul<true>(v, q, col);
}

// The vectors of x a thread holds when the block quantizes M rows per token or per tensor: the
// block's vectors j = i, i + 256, ... of every row (at most kQuantizeVecs / M of each; x's vectors
// share.vector(j)), all loaded at once.
template <typename T, int M>
__device__ __forceinline__ void load_rows(const QuantizeParams& q, int nvec, XShare share,
                                          RawVec<T, kVec<T>> (&cached)[M][kQuantizeVecs / M]) {
#pragma unroll
  for (int r = 0; r < M; ++r)
#pragma unroll
    for (int c = 0; c < kQuantizeVecs / M; ++c) {
      const int i = share.vector(c * kThreads + static_cast<int>(threadIdx.x), kVec<T>);
      if (i < nvec) cached[r][c] = load_raw<T, kVec<T>>(x_at<T>(q, r, i * kVec<T>));
    }
}

// f(col, v) for each vector of one row that load_rows loaded, as floats (values()).
template <typename T, int M, class F>
__device__ __forceinline__ void for_row_values(const QuantizeParams& q, int nvec, XShare share,
                                               const RawVec<T, kVec<T>> (&row)[kQuantizeVecs / M], F&& f) {
#pragma unroll
  for (int c = 0; c < kQuantizeVecs / M; ++c) {
    const int i = share.vector(c * kThreads + static_cast<int>(threadIdx.x), kVec<T>);
    if (i < nvec) {
      float v[kVec<T>];
      values<T>(q, row[c], i * kVec<T>, v);
      f(i * kVec<T>, v);
    }
  }
}

// Per token, M rows, the vectors held as load_rows takes them: the block's share of each row
// (XShare; the whole row at split 1). With a split, each block sends its rows' amaxes into the
// others' shared memory (st.async, counted by the receiver's mbarrier), and takes the max with
// theirs; the max does not depend on the order, so the scale is tcgemm.quantize's. No cluster
// barrier with release semantics stands after the ring's first copies: it would wait for them
// (H200, bench_decode M = 1, with a cluster barrier there: 8B o 0.78x, 8B down 0.94x the speed).
// The barriers are set up, and their arrivals made, before the loads (a release there waits for
// nothing); a cluster arrive then (relaxed, after the barriers' init fence) and its wait before
// the sends make every barrier initialized before a block sends to it. Each block waits for the
// others' amaxes, so none leaves before the sends into its shared memory have landed.
template <typename T, int M, class F>
__device__ __forceinline__ void tokens(const QuantizeParams& q, uint8_t* smem, const QuantizedA& s, XShare share,
                                       F&& after_loads) {
  constexpr int VEC = kVec<T>;
  constexpr int kPerRow = kQuantizeVecs / M;
  __shared__ float partials[kWarps][M];
  __shared__ float sent[XShare::kMostSplit][M];  // the amaxes of the cluster's blocks, by rank
  __shared__ uint64_t sent_bar;
  const int nvec = static_cast<int>(q.k) / VEC;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (share.split > 1) {
    if (threadIdx.x == 0) {
      ptx::mbarrier_init(&sent_bar, 1);
      ptx::mbarrier_fence_init();
    }
    __syncthreads();  // the init before any use of the barrier
    // Its one arrival, with the bytes the others send (which may come before it).
    if (threadIdx.x == 0)
      ptx::mbarrier_arrive_expect_tx(&sent_bar, static_cast<uint32_t>(sizeof(float) * M * (share.split - 1)));
    ptx::cluster_arrive_relaxed();
  }
  RawVec<T, VEC> cached[M][kPerRow];
  load_rows<T, M>(q, nvec, share, cached);
  after_loads();
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float amax = 0.f;
    for_row_values<T, M>(q, nvec, share, cached[r], [&](int, float(&v)[VEC]) { amax = abs_max(amax, v); });
    amax = warp_max(amax);
    if (lane == 0) partials[warp][r] = amax;
  }
  __syncthreads();
  float amax[M];
#pragma unroll
  for (int r = 0; r < M; ++r) amax[r] = warp_max(lane < kWarps ? partials[lane][r] : 0.f);
  if (share.split > 1) {
    ptx::cluster_wait_acquire();
    if (threadIdx.x < share.split && static_cast<int>(threadIdx.x) != share.rank) {
      const uint32_t other = threadIdx.x;
#pragma unroll
      for (int r = 0; r < M; ++r)
        ptx::st_async_cluster(ptx::cluster_map_shared(&sent[share.rank][r], other), amax[r],
                              ptx::cluster_map_shared(&sent_bar, other));
    }
    ptx::mbarrier_wait(&sent_bar, 0);
    for (int other = 0; other < share.split; ++other)
#pragma unroll
      for (int r = 0; r < M; ++r)
        if (other != share.rank) amax[r] = ptx::max_nan(amax[r], sent[other][r]);
  }
  float* scales = reinterpret_cast<float*>(smem + s.scales_at);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    const float scale = quant_scale_from_amax(amax[r]);
    if (threadIdx.x == 0) scales[r] = scale;
    const Quantizer<false> qz(scale, 0);
    for_row_values<T, M>(q, nvec, share, cached[r],
                         [&](int col, float(&v)[VEC]) { store_group<VEC>(q_at(smem, s, r, col), v, qz); });
  }
}

// Static per tensor, M rows: the given scale for all of x, no amax; the loads as per token. A
// non-finite x quantizes to 0 and, like an invalid given scale, makes the scale the epilogue
// reads NaN: the scale tcgemm.quantize returns for the tensor (the static kernel's rule).
template <typename T, int M, class F>
__device__ __forceinline__ void static_tensor(const QuantizeParams& q, uint8_t* smem, const QuantizedA& s,
                                              F&& after_loads) {
  constexpr int VEC = kVec<T>;
  constexpr int kPerRow = kQuantizeVecs / M;
  const int nvec = static_cast<int>(q.k) / VEC;
  RawVec<T, VEC> cached[M][kPerRow];
  load_rows<T, M>(q, nvec, XShare{}, cached);
  after_loads();
  const float given = q.scale_in[0];
  const Quantizer<false> qz(given, 0);
  bool bad = !quant_scale_valid(given);
#pragma unroll
  for (int r = 0; r < M; ++r)
    for_row_values<T, M>(q, nvec, XShare{}, cached[r], [&](int col, float(&v)[VEC]) {
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        if (!quant_finite(v[e])) {
          v[e] = 0.f;
          bad = true;
        }
      }
      store_group<VEC>(q_at(smem, s, r, col), v, qz);
    });
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) reinterpret_cast<float*>(smem + s.scales_at)[0] = bad ? __int_as_float(0x7fffffff) : given;
}

// Per 1x128 group: 128 / VEC lanes own a group, one vector each, as in the group kernel; pass c
// takes groups (c * kWarps + warp) * groups-per-warp + lane / (128 / VEC). All passes' loads
// first.
template <typename T, class F>
__device__ __forceinline__ void groups(const QuantizeParams& q, uint8_t* smem, const QuantizedA& s, F&& after_loads) {
  constexpr int VEC = kVec<T>;
  constexpr int LANES = kScaleBlock / VEC;
  constexpr int GROUPS_PER_WARP = kWarp / LANES;
  const int k = static_cast<int>(q.k), warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, sub = lane % LANES;
  const int per_row = static_cast<int>(scale_blocks(k)), total = static_cast<int>(q.m) * per_row;
  float* scales = reinterpret_cast<float*>(smem + s.scales_at);
  auto where = [&](int c, int& gid, int& r, int& col) {
    gid = (c * kWarps + warp) * GROUPS_PER_WARP + lane / LANES;
    r = gid / per_row;
    col = (gid - r * per_row) * kScaleBlock + sub * VEC;
    return gid < total && col < k;
  };
  RawVec<T, VEC> cached[kQuantizeVecs];
#pragma unroll
  for (int c = 0; c < kQuantizeVecs; ++c) {
    int gid, r, col;
    if (where(c, gid, r, col)) cached[c] = load_raw<T, VEC>(x_at<T>(q, r, col));
  }
  after_loads();
#pragma unroll
  for (int c = 0; c < kQuantizeVecs; ++c) {
    if ((c * kWarps + warp) * GROUPS_PER_WARP >= total) break;  // warp-uniform: every lane shuffles
    int gid, r, col;
    const bool here = where(c, gid, r, col);
    float v[VEC];
    float amax = 0.f;
    if (here) {
      values<T>(q, cached[c], col, v);
      amax = abs_max(amax, v);
    }
    const float scale = quant_scale_from_amax(warp_max<LANES>(amax));
    if (gid < total && sub == 0) scales[gid] = scale;
    if (here) store_group<VEC>(q_at(smem, s, r, col), v, Quantizer<false>(scale, 0));
  }
}

}  // namespace quantize_in_block

// Quantizes x (q.m rows of q.k values of X::Elem, quantizes_in_kernel(q, share.split); one row
// per token if X::kOneToken) into `smem` (QuantizedA's layout): one row per token, the block's
// share of it (the vectors its warps read; the rest of the row is not written); else all of x.
// Called by every thread of the block after griddep_wait; ends with a barrier. A thread's share of
// x is loaded at once and kept in registers from the amax to the quantization: one round trip to
// L2 per block. after_loads() runs once those loads are issued (the caller's prefetch of B, which
// then queues behind them).
template <class X, class F>
__device__ __forceinline__ void quantize_a_to_shared(const QuantizeParams& q, uint8_t* smem, const QuantizedA& s,
                                                     XShare share, F&& after_loads) {
  namespace in_block = quantize_in_block;
  using T = typename X::Elem;
  if constexpr (X::kOneToken) {
    in_block::tokens<T, 1>(q, smem, s, share, after_loads);
  } else if (q.scale_in != nullptr) {
    switch (q.m) {
      case 1: in_block::static_tensor<T, 1>(q, smem, s, after_loads); break;
      case 2: in_block::static_tensor<T, 2>(q, smem, s, after_loads); break;
      case 3: in_block::static_tensor<T, 3>(q, smem, s, after_loads); break;
      default: in_block::static_tensor<T, 4>(q, smem, s, after_loads); break;
    }
  } else if (q.granularity == QuantGranularity::kToken) {
    switch (q.m) {  // the row count as a constant: no per-row arrays indexed at run time
      case 1: in_block::tokens<T, 1>(q, smem, s, XShare{}, after_loads); break;
      case 2: in_block::tokens<T, 2>(q, smem, s, XShare{}, after_loads); break;
      case 3: in_block::tokens<T, 3>(q, smem, s, XShare{}, after_loads); break;
      default: in_block::tokens<T, 4>(q, smem, s, XShare{}, after_loads); break;
    }
  } else {
    in_block::groups<T>(q, smem, s, after_loads);
  }
  // The bytes past K of each row's last K block: the main loop reads whole K blocks of A.
  const int k = static_cast<int>(q.k), pad = round_up(k, kBK) - k;
  for (int i = threadIdx.x; i < q.m * pad; i += kThreads) in_block::q_at(smem, s, i / pad, k + i % pad)[0] = 0;
  __syncthreads();
}
#endif

}  // namespace tcgemm::skinny

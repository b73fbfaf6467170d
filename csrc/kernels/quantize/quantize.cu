// int8 quantization kernels: symmetric, and asymmetric (a zero point) per token or with static
// scales.
//
// How the work is split:
// - Per token (dynamic): a team of threads owns one row. Rows of up to 1024 elements get one
//   warp each (8 rows per block); longer rows get a block (TeamShape). The team loads its row
//   into registers (bf16/fp16 kept packed as loaded), reduces amax, and quantizes from the
//   registers: one pass over global memory (up to 16384 elements, 32768 for bf16/fp16 with a
//   block of 1024 threads). A few rows of bf16/fp16 take more threads a row, 16 values each
//   (TeamShape::kShortCache): their time is a block's latency, not the SMs' rate. Longer rows
//   are swept twice by the same kernel: once for amax, once to quantize; the second read mostly
//   hits L2 (and L1) because the block read the row just before.
// - Per group (dynamic): 128 / VEC lanes own one 128-wide group (one 16-byte load each when
//   vectorized, four strided scalar loads otherwise), reduce amax with shuffles inside their
//   part of the warp and quantize from registers: one pass.
// - Per tensor (dynamic): amax needs the whole tensor before the first value can be quantized,
//   so it takes two kernels on the stream: amax_kernel reduces per block and folds the block's
//   amax into a 4-byte workspace with atomicMax on the float's bits (for non-negative floats
//   the unsigned bit patterns order like the values), the workspace being zeroed first with
//   cudaMemsetAsync; then quantize_scaled_kernel derives the scale from it and quantizes.
// - Static scales: quantize_scaled_kernel alone, reading the given scale of each element.
//
// Loads are 16 bytes wide (8 bf16/fp16 or 4 fp32 values) when x's base address, its row stride
// and K allow them and its K stride is 1 (K also keeps the int8 stores of q aligned); other
// layouts, any K stride included (0 for an expand-ed row), take the scalar path in place, which
// is slower but gives the same bits (rotated rows excepted: the op copies them into vectors
// first). Every quotient is the correctly rounded one (QuantDivisor:
// the reciprocal once per scale, then FMA steps per element).
//
// Overlap (QuantizeParams::pdl, tcgemm.quant_linear): every kernel waits for the kernel before it
// (griddep_wait) before its first access to memory, and then lets the GEMM after it start
// (griddep_launch_dependents), which streams its weights while this kernel runs.
//
// The W4 K order (QuantizeParams::w4_rowsum, W4: tcgemm.quant_linear where the W4 kernel reads x):
// the token kernel stores each vector of eight values at its slots in that kernel's order and
// sums the row's int8 values, which would otherwise take a pass of their own (about 1.6 us a
// layer at 32 rows, docs/design/int4.md).
//
// Rotated (QuantizeParams::rotate, ROT): each 128-value block of a row is rotated (hadamard128)
// by the lanes that hold it before the amax and the quantization, per token or per group.
//
// Asymmetric (ASYM, a template flag so that the symmetric kernels are unchanged): the token kernel
// reduces max x and max -x instead of max |x| (QuantRange) and writes a zero point beside each
// scale; the static kernel adds the given zero point. The per-group and dynamic per-tensor
// kernels are symmetric only.
//
// Bad data follows common/quantize_params.h: the amax reductions propagate NaN (amax_fold,
// max_nan), so a group holding a NaN or an inf gets a NaN scale and quantizes to zeros; the
// static kernel zeroes non-finite values and marks their group's returned scale NaN, as it does
// for a group whose given scale is not a positive finite number. The returned scales start as a
// copy of the given ones, except for a small x with one static per-tensor scale: one block then
// covers x and writes the returned scale at its end (QuantizeParams::scale_out_by_kernel).
#include "kernels/quantize/quantize.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "common/launch_kernel.cuh"
#include "common/math.h"
#include "kernels/quantize/quantize_vec.cuh"
#include "ptx/griddep.cuh"
#include "ptx/minmax.cuh"

namespace tcgemm {
namespace {

using namespace quant;  // NOLINT: the shared per-vector pieces


constexpr int kCacheElems = 32;         // values per thread a warp team keeps in registers
constexpr int kMaxTeamThreads = 512;    // block size of the token kernel for long rows

// How the token kernel's block teams (a block per row) hold a row in registers: kCache vectors
// per thread, at most kThreads threads, and a register budget that lets kBlocksPerSm blocks
// share an SM. Rows of packed bf16/fp16 (16-byte vectors kept as loaded) take 8 vectors (64
// values in 32 registers) per thread and up to 256 threads, and 4 rows fit an SM (<= 64
// registers): measured on the H200 at 2048 x 14336 bf16, 30 us, where 512 threads of 32 floats
// (2 rows per SM) took 45 us, and 5 rows per SM (spilling at 48 registers) or rows staged in
// shared memory by cp.async (7 rows per SM, or 2 buffers per block and a grid of resident
// blocks) took 32-34 us. Others: 32 values per thread, up to 512 threads. Both cache rows of up
// to 16384 values. Packed rows of up to 32768 values (70B down, K = 28672) take a block of up to
// 1024 threads of 4 vectors each (kLong*, 16 registers of x, one block per SM), where sweeping
// twice read the row from L2 twice with half the threads; longer rows are swept twice.
template <typename T, int VEC>
struct TeamShape {
  static constexpr bool kPacked16 = sizeof(T) == 2 && VEC * sizeof(T) == 16;
  static constexpr int kCache = kPacked16 ? 8 : kCacheElems / VEC;
  static constexpr int kThreads = kPacked16 ? 256 : kMaxTeamThreads;
  static constexpr int kBlocksPerSm = kPacked16 ? 4 : 1;
  static constexpr int kLongCache = kPacked16 ? 4 : 0;  // 0: no long-row team
  static constexpr int kLongThreads = 1024;
  // A few rows are bound by a block's latency rather than by the SMs' rate: more threads a row,
  // fewer values each (kShortCache vectors), where the row fits and the grid is small
  // (kShortTeamMaxThreads). On the H200 at 32-128 rows of the Llama layers' K = 4096 - 14336 it took
  // 0.2-1.3 us off a W4A8 layer (docs/design/int4.md); 8B down (K = 14336) at 256 rows and
  // K = 8192 at 512 rows, above that size, were 2-5% slower with it.
  static constexpr int kShortCache = kPacked16 ? 2 : 0;  // 0: no short team
  static constexpr int kShortThreads = 1024;
  // The kernel tells its teams apart by the vectors they cache (team_threads).
  static_assert(kLongCache != kCache && kShortCache != kCache && kCache > 0 &&
                    (kShortCache == 0 || kShortCache != kLongCache),
                "each block team caches its own number of vectors");
};

// The token kernel's launch bounds for a block team caching CACHE vectors per thread (0: none).
template <typename T, int VEC, int CACHE>
constexpr int team_threads() {
  using Team = TeamShape<T, VEC>;
  return CACHE == 0                 ? kMaxTeamThreads
         : CACHE == Team::kLongCache  ? Team::kLongThreads
         : CACHE == Team::kShortCache ? Team::kShortThreads
                                      : Team::kThreads;
}
template <typename T, int VEC, int CACHE>
constexpr int team_blocks_per_sm() {
  using Team = TeamShape<T, VEC>;
  return CACHE == 0 || CACHE == Team::kLongCache || CACHE == Team::kShortCache ? 1 : Team::kBlocksPerSm;
}
constexpr int kBlockThreads = 256;      // every other kernel
// The token kernel takes TeamShape's short team while its blocks have at most this many threads in
// all: about half of what an H100 / H200 holds at once (132 SMs of 2048).
constexpr int64_t kShortTeamMaxThreads = 128 * 1024;
constexpr int64_t kMaxBlocks = 1 << 20; // grids are grid-stride loops beyond this

// Element e of a row of x: 16-byte vectors need a unit K stride (the launcher checks), the scalar
// path reads any stride.
template <int VEC, typename T>
__device__ __forceinline__ const T* x_at(const T* x_row, int64_t e, int64_t stride_col) {
  return VEC == 1 ? x_row + e * stride_col : x_row + e;
}

// The range of a warp team or a block, every field reduced with block_max / warp_max.
template <bool ASYM>
__device__ __forceinline__ QuantRange<ASYM> warp_range(QuantRange<ASYM> r) {
  if constexpr (ASYM) {
    r.hi = warp_max(r.hi);
    r.neg_lo = warp_max(r.neg_lo);
  } else {
    r.amax = warp_max(r.amax);
  }
  return r;
}

template <bool ASYM>
__device__ __forceinline__ QuantRange<ASYM> block_range(QuantRange<ASYM> r, float* partials) {
  if constexpr (ASYM) {
    r.hi = block_max(r.hi, partials);
    r.neg_lo = block_max(r.neg_lo, partials);
  } else {
    r.amax = block_max(r.amax, partials);
  }
  return r;
}

// One row per team (a warp when WARP_TEAM, else the block). CACHE vectors per thread are held
// in registers between the amax reduction and the quantization; CACHE == 0 sweeps the row twice.
// Needs K % VEC == 0 when VEC > 1 (checked by the launcher).
// With channel multipliers (MUL) a block team gets twice the registers: their loads and
// products spill at the 64-register budget of 4 blocks per SM.
// ROT (QuantizeParams::rotate; VEC > 1, K a multiple of kScaleBlock): the 128 / VEC lanes that
// hold a block's vectors (vector i of the row is held by lane i mod team, and the team is a whole
// number of warps) rotate it after the loads; a cached row is kept rotated, as floats (a block team
// gets twice the registers for them, as with MUL: at 64 registers the rotation's values spilled
// and the kernel took 3x the time of the plain one), and rows swept twice are rotated again in the
// second sweep. Every lane takes part in the rotations, those past the row with zeros.
// W4 (QuantizeParams::w4_rowsum; VEC == 8, symmetric, rotated or not): each vector's eight int8 values
// are stored in the W4 K order (store_w4_order8) rather than in place, and the row's sum of them
// goes to w4_rowsum[row]; a block team gets twice the registers (at 64 its stores' addresses
// spilled 64 bytes), four times rotated (at 128 it spilled 92 bytes).
template <typename T, int VEC, int CACHE, bool WARP_TEAM, bool MUL, bool ASYM, bool ROT = false, bool W4 = false>
__global__ void __launch_bounds__(WARP_TEAM ? kBlockThreads : team_threads<T, VEC, CACHE>(),
                                  WARP_TEAM ? 1
                                            : std::max(1, team_blocks_per_sm<T, VEC, CACHE>() /
                                                              (ROT && W4 ? 4 : MUL || ROT || W4 ? 2 : 1)))
    quantize_token_kernel(const QuantizeParams p) {
  static_assert(!W4 || (VEC == 8 && !ASYM), "the W4 K order: vectors of 8 values, symmetric");
  ptx::start_after_previous_kernel();  // see "Overlap" above
  __shared__ float partials[kWarp];  // block teams only
  __shared__ int32_t sum_partials[W4 && !WARP_TEAM ? kWarp : 1];
  const int team = WARP_TEAM ? kWarp : blockDim.x;
  const int lane = WARP_TEAM ? threadIdx.x % kWarp : threadIdx.x;
  const int64_t teams_per_block = WARP_TEAM ? blockDim.x / kWarp : 1;
  const int64_t first_row = blockIdx.x * teams_per_block + (WARP_TEAM ? threadIdx.x / kWarp : 0);
  const int64_t nvec = p.k / VEC;
  const T* x = static_cast<const T*>(p.x);

  // The loop bound is uniform over the team, as the shuffles and barriers need.
  for (int64_t row = first_row; row < p.m; row += int64_t{gridDim.x} * teams_per_block) {
    const T* x_row = x + row * p.x_stride_row;
    int8_t* q_row = p.q + row * p.q_stride_row;
    int32_t w4_sum = 0;  // W4: the row's int8 values summed
    // Vector i of the row quantized into q_row, in place or in the W4 K order.
    auto put = [&](int64_t i, const float (&v)[VEC], const Quantizer<ASYM>& qz) {
      if constexpr (W4) {
        const QuantPack<VEC> pack = quantize_pack<VEC>(v, qz);
        uint32_t words[2];
        memcpy(words, pack.b, sizeof(words));
        store_w4_order8(q_row, i * VEC, words[0], words[1]);
        w4_sum = __dp4a(static_cast<int>(words[0]), 0x01010101, w4_sum);
        w4_sum = __dp4a(static_cast<int>(words[1]), 0x01010101, w4_sum);
      } else {
        store_quantized<VEC>(q_row + i * VEC, v, qz);
      }
    };
    QuantRange<ASYM> range;
    RawVec<T, VEC> cached[CACHE > 0 ? CACHE : 1];
    float rotated[ROT && CACHE > 0 ? CACHE : 1][VEC];  // ROT: the cached vectors rotated
    // 32-bit offsets (K < 2^31) where they save registers (the vectorized rows), 64-bit ones
    // where the compiler folds them better (the scalar layouts).
    using Index = std::conditional_t<VEC == 1, int64_t, int>;
    if constexpr (CACHE > 0) {
      // Vectorized rows: all of a thread's loads first, then the reduction, so they are in
      // flight together (the scalar layouts interleave, which keeps their 32 loads' addresses
      // out of the registers).
      // The scalar layouts walk one pointer by team * K-stride (a product per load spilled).
      const T* walk = x_row + lane * p.x_stride_col;
      const int64_t walk_step = int64_t{team} * p.x_stride_col;
#pragma unroll
      for (int c = 0; c < CACHE; ++c) {
        const Index i = Index{c} * team + lane;
        if constexpr (VEC == 1) {
          if (i < nvec) {
            cached[c] = load_raw<T, VEC>(walk);
            float v[1] = {cached[c].get(0)};
            apply_channel_mul<MUL>(v, p, i);
            range.fold(v[0]);
          }
          walk += walk_step;
        } else {
          if (i < nvec) {
            cached[c] = load_raw<T, VEC>(x_row + i * VEC);
          } else if constexpr (ROT) {
            cached[c].set(make_uint4(0u, 0u, 0u, 0u));
          }
        }
      }
      if constexpr (VEC > 1) {
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
          const bool in_row = c * team + lane < nvec;
          if constexpr (ROT) {
            to_floats(cached[c], rotated[c]);
            hadamard128(rotated[c]);
            if (in_row) fold_all(range, rotated[c]);
          } else if (in_row) {
            float v[VEC];
            to_floats(cached[c], v);
            apply_channel_mul<MUL>(v, p, (int64_t{c} * team + lane) * VEC);
            fold_all(range, v);
          }
        }
      }
    } else if constexpr (ROT) {
      for (int64_t at = 0; at < nvec; at += team) {  // team-uniform: every lane rotates
        const int64_t i = at + lane;
        float v[VEC] = {};
        if (i < nvec) load_vec<T, VEC>(x_row + i * VEC, v);
        hadamard128(v);
        if (i < nvec) fold_all(range, v);
      }
    } else {
      for (int64_t i = lane; i < nvec; i += team) {
        float v[VEC];
        load_vec<T, VEC>(x_at<VEC>(x_row, i * VEC, p.x_stride_col), v);
        apply_channel_mul<MUL>(v, p, i * VEC);
        fold_all(range, v);
      }
    }
    if constexpr (WARP_TEAM) {
      range = warp_range(range);
    } else {
      range = block_range(range, partials);
    }
    const float scale = range.scale();
    const Quantizer<ASYM> qz(scale, range.zero(scale));
    if (lane == 0) {
      p.scale_out[row] = scale;
      if constexpr (ASYM) p.zero_out[row] = qz.zero;
      if constexpr (W4) {
        if (!qz.valid()) p.w4_rowsum[row] = 0;
      }
    }
    if (!qz.valid()) {  // a NaN or inf in the row: zeros (in any order; team-uniform, no barrier below)
      for (int64_t i = lane; i < nvec; i += team) store_fill<VEC>(q_row + i * VEC, qz.fill());
      continue;
    }
    if constexpr (CACHE > 0) {
#pragma unroll
      for (int c = 0; c < CACHE; ++c) {
        const Index i = Index{c} * team + lane;
        if constexpr (ROT) {
          if (i < nvec) put(i, rotated[c], qz);
        } else if (i < nvec) {
          float v[VEC];
          to_floats(cached[c], v);
          apply_channel_mul<MUL>(v, p, int64_t{i} * VEC);
          put(i, v, qz);
        }
      }
    } else if constexpr (ROT) {
      for (int64_t at = 0; at < nvec; at += team) {  // the second sweep, rotated again
        const int64_t i = at + lane;
        float v[VEC] = {};
        if (i < nvec) load_vec<T, VEC>(x_row + i * VEC, v);
        hadamard128(v);
        if (i < nvec) put(i, v, qz);
      }
    } else {
      for (int64_t i = lane; i < nvec; i += team) {
        float v[VEC];
        load_vec<T, VEC>(x_at<VEC>(x_row, i * VEC, p.x_stride_col), v);  // second sweep: the row was just read
        apply_channel_mul<MUL>(v, p, i * VEC);
        put(i, v, qz);
      }
    }
    if constexpr (W4) {
      if constexpr (WARP_TEAM) {
        w4_sum = warp_sum(w4_sum);
      } else {
        w4_sum = block_sum(w4_sum, sum_partials);
      }
      if (lane == 0) p.w4_rowsum[row] = w4_sum;  // |sum| <= 127 K: no overflow for any K the ops take
    }
  }
}

// One 128-wide group per LANES lanes. With 16-byte loads each lane holds one vector of its
// group; the scalar path (VEC == 1) has 32 lanes per group and 4 coalesced values per lane.
// The last group of a row may be short. Needs K % VEC == 0 when VEC > 1. ROT: the group's lanes
// rotate it (hadamard128; VEC > 1, K a multiple of kScaleBlock) before the amax.
template <typename T, int VEC, bool MUL, bool ROT = false>
__global__ void __launch_bounds__(kBlockThreads) quantize_group_kernel(const QuantizeParams p) {
  ptx::start_after_previous_kernel();  // see "Overlap" above
  constexpr int LANES = VEC == 1 ? kWarp : kScaleBlock / VEC;
  constexpr int PER_LANE = kScaleBlock / (LANES * VEC);  // vectors per lane
  constexpr int GROUPS_PER_WARP = kWarp / LANES;
  static_assert(LANES <= kWarp && kWarp % LANES == 0 && PER_LANE * LANES * VEC == kScaleBlock);
  const int lane = threadIdx.x % kWarp;
  const int sub = lane % LANES;
  const int64_t groups = p.groups();
  const int64_t total = p.m * groups;
  const int64_t warps_in_grid = int64_t{gridDim.x} * (blockDim.x / kWarp);
  const T* x = static_cast<const T*>(p.x);

  // Warp-uniform loop: the lanes of a group past the end still join the shuffles.
  for (int64_t w = blockIdx.x * int64_t{blockDim.x / kWarp} + threadIdx.x / kWarp; w * GROUPS_PER_WARP < total;
       w += warps_in_grid) {
    const int64_t gid = w * GROUPS_PER_WARP + lane / LANES;
    const bool valid = gid < total;
    const int64_t row = valid ? gid / groups : 0;
    const int64_t col0 = (gid - row * groups) * kScaleBlock;
    const T* x_row = x + row * p.x_stride_row;
    float v[PER_LANE][VEC];
    float amax = 0.f;
    if constexpr (ROT) {
      static_assert(PER_LANE == 1, "a rotated group is one vector per lane");
#pragma unroll
      for (int e = 0; e < VEC; ++e) v[0][e] = 0.f;
      if (valid) load_vec<T, VEC>(x_row + col0 + sub * VEC, v[0]);
      hadamard128(v[0]);  // every lane: the shuffles
      amax = abs_max(amax, v[0]);
    } else {
#pragma unroll
      for (int j = 0; j < PER_LANE; ++j) {
        const int64_t col = col0 + (int64_t{j} * LANES + sub) * VEC;
        if (valid && col < p.k) {
          load_vec<T, VEC>(x_at<VEC>(x_row, col, p.x_stride_col), v[j]);
          apply_channel_mul<MUL>(v[j], p, col);
          amax = abs_max(amax, v[j]);
        }
      }
    }
    amax = warp_max<LANES>(amax);
    const float scale = quant_scale_from_amax(amax);
    if (!valid) continue;
    if (sub == 0) p.scale_out[gid] = scale;  // [M, G] contiguous: index row * G + group
    const Quantizer<false> qz(scale, 0);
#pragma unroll
    for (int j = 0; j < PER_LANE; ++j) {
      const int64_t col = col0 + (int64_t{j} * LANES + sub) * VEC;
      if (col < p.k) store_group<VEC>(p.q + row * p.q_stride_row + col, v[j], qz);
    }
  }
}

// Per-tensor amax: rows over blockIdx.y, vectors of a row over blockIdx.x. Each block folds its
// amax into the workspace (zeroed before the launch) with an integer atomicMax on the bits.
template <typename T, int VEC, bool MUL>
__global__ void __launch_bounds__(kBlockThreads) amax_kernel(const QuantizeParams p) {
  ptx::start_after_previous_kernel();  // see "Overlap" above
  __shared__ float partials[kWarp];
  const int64_t nvec = p.k / VEC;
  const T* x = static_cast<const T*>(p.x);
  float amax = 0.f;
  for (int64_t row = blockIdx.y; row < p.m; row += gridDim.y) {
    const T* x_row = x + row * p.x_stride_row;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nvec; i += int64_t{gridDim.x} * blockDim.x) {
      float v[VEC];
      load_vec<T, VEC>(x_at<VEC>(x_row, i * VEC, p.x_stride_col), v);
      apply_channel_mul<MUL>(v, p, i * VEC);
      amax = abs_max(amax, v);
    }
  }
  amax = block_max(amax, partials);
  // amax is +0, positive, +inf or the positive NaN max.NaN returns: its bits order like those
  // values, NaN above inf, so the grid's fold keeps a NaN.
  if (threadIdx.x == 0 && amax != 0.f) atomicMax(static_cast<unsigned int*>(p.workspace), __float_as_uint(amax));
}

// Quantizes with a known scale per element: the given (static) scales, or for a dynamic
// per-tensor quantization the scale derived from the amax in the workspace (also written out).
// Static: a non-finite x quantizes to 0, and its group's returned scale becomes NaN, as does
// that of a group whose scale is invalid (several threads may write the same NaN).
// ASYM (static only): the given zero point of the element's group is added; one outside
// [-128, 127] marks the group bad like an invalid scale (its values are still
// clamp(round(x / scale) + zero)); a group with an invalid scale, and a non-finite x, hold the
// zero point.
template <typename T, int VEC, bool MUL, bool ASYM>
__global__ void __launch_bounds__(kBlockThreads) quantize_scaled_kernel(const QuantizeParams p) {
  ptx::start_after_previous_kernel();  // see "Overlap" above
  const bool per_tensor = p.granularity == QuantGranularity::kTensor;
  float scale = 0.f;
  int32_t zero = ASYM ? p.zero_in[0] : 0;
  if (per_tensor) {
    scale = p.scale_in != nullptr
                ? p.scale_in[0]
                : quant_scale_from_amax(__uint_as_float(*static_cast<const unsigned int*>(p.workspace)));
    if (p.scale_in == nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *p.scale_out = scale;
  }
  const int64_t nvec = p.k / VEC;
  const int64_t groups = p.groups();
  const T* x = static_cast<const T*>(p.x);
  bool any_bad = false;  // this thread's values (scale_out_by_kernel)
  for (int64_t row = blockIdx.y; row < p.m; row += gridDim.y) {
    const T* x_row = x + row * p.x_stride_row;
    if (p.granularity == QuantGranularity::kToken) {
      scale = p.scale_in[row];
      if constexpr (ASYM) zero = p.zero_in[row];
    }
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < nvec; i += int64_t{gridDim.x} * blockDim.x) {
      // A vector never straddles two groups: 128 is a multiple of VEC.
      const int64_t group = i * VEC / kScaleBlock;
      if (p.granularity == QuantGranularity::kGroup) scale = p.scale_in[row * groups + group];
      float v[VEC];
      load_vec<T, VEC>(x_at<VEC>(x_row, i * VEC, p.x_stride_col), v);
      apply_channel_mul<MUL>(v, p, i * VEC);
      if (p.scale_in != nullptr) {
        bool bad = !quant_scale_valid(scale) || (ASYM && !quant_zero_valid(zero));
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (!quant_finite(v[e])) {
            v[e] = 0.f;
            bad = true;
          }
        }
        any_bad = any_bad || bad;
        if (bad) {
          const int64_t at = p.granularity == QuantGranularity::kTensor  ? 0
                             : p.granularity == QuantGranularity::kToken ? row
                                                                         : row * groups + group;
          p.scale_out[at] = __int_as_float(0x7fffffff);
        }
      }
      store_group<VEC>(p.q + row * p.q_stride_row + i * VEC, v, Quantizer<ASYM>(scale, zero));
    }
  }
  if (p.scale_out_by_kernel) {  // one block over all of x (block-uniform): the whole group is seen here
    const bool bad = __syncthreads_or(any_bad || !quant_scale_valid(scale) || (ASYM && !quant_zero_valid(zero)));
    if (threadIdx.x == 0) {
      *p.scale_out = bad ? __int_as_float(0x7fffffff) : scale;
      if constexpr (ASYM) *p.zero_out = zero;
    }
  }
}

// A 2-D grid for the element-wise kernels: enough blocks along a row to cover it (up to 64),
// and rows spread over blockIdx.y, about 8192 blocks in all.
dim3 elementwise_grid(int64_t m, int64_t nvec) {
  const int64_t x = std::clamp<int64_t>(ceil_div<int64_t>(nvec, kBlockThreads), 1, 64);
  const int64_t y = std::clamp<int64_t>(8192 / x, 1, std::min<int64_t>(m, 65535));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

template <typename T, int VEC, bool MUL, bool ASYM, bool ROT = false, bool W4 = false>
void launch_token(const QuantizeParams& p) {
  constexpr int kWarpCache = kCacheElems / VEC;
  using Team = TeamShape<T, VEC>;
  const int64_t nvec = p.k / VEC;
  if (nvec <= int64_t{kWarp} * kWarpCache) {
    constexpr int64_t rows_per_block = kBlockThreads / kWarp;
    const int64_t blocks = std::min(ceil_div(p.m, rows_per_block), kMaxBlocks);
    launch_kernel(quantize_token_kernel<T, VEC, kWarpCache, true, MUL, ASYM, ROT, W4>, dim3(static_cast<unsigned>(blocks)),
                  kBlockThreads, 0, p.stream, p.pdl, p);
    return;
  }
  const unsigned blocks = static_cast<unsigned>(std::min(p.m, kMaxBlocks));
  auto threads_of = [&](int cache) { return round_up<int64_t>(ceil_div<int64_t>(nvec, cache), kWarp); };
  // A block team caching Cache vectors a thread, where the row fits its threads.
  auto launch_team = [&](auto cache) {
    constexpr int Cache = decltype(cache)::value;
    const int64_t threads = threads_of(Cache);
    if (threads > team_threads<T, VEC, Cache>()) return false;
    launch_kernel(quantize_token_kernel<T, VEC, Cache, false, MUL, ASYM, ROT, W4>, blocks,
                  static_cast<unsigned>(threads), 0, p.stream, p.pdl, p);
    return true;
  };
  using Short = std::integral_constant<int, Team::kShortCache>;
  using Long = std::integral_constant<int, Team::kLongCache>;
  if constexpr (Team::kShortCache > 0) {
    if (p.m * threads_of(Team::kShortCache) <= kShortTeamMaxThreads && launch_team(Short{})) return;
  }
  // Scalar rows with multipliers and zero points spill when cached: they are swept twice.
  if constexpr (!(VEC == 1 && MUL && ASYM)) {
    if (launch_team(std::integral_constant<int, Team::kCache>{})) return;
  }
  if constexpr (Team::kLongCache > 0) {
    if (launch_team(Long{})) return;
  }
  launch_kernel(quantize_token_kernel<T, VEC, 0, false, MUL, ASYM, ROT, W4>, blocks, kMaxTeamThreads, 0, p.stream, p.pdl, p);
}

template <typename T, int VEC, bool MUL, bool ROT = false>
void launch_group(const QuantizeParams& p) {
  constexpr int64_t lanes = VEC == 1 ? kWarp : kScaleBlock / VEC;
  constexpr int64_t groups_per_block = kBlockThreads / kWarp * (kWarp / lanes);
  const int64_t blocks = std::min(ceil_div(p.m * p.groups(), groups_per_block), kMaxBlocks);
  launch_kernel(quantize_group_kernel<T, VEC, MUL, ROT>, dim3(static_cast<unsigned>(blocks)), kBlockThreads, 0, p.stream, p.pdl,
                p);
}

template <typename T, int VEC, bool MUL, bool ASYM>
void launch_scaled(const QuantizeParams& p, bool overlap) {
  const dim3 grid = p.scale_out_by_kernel ? dim3(1, 1) : elementwise_grid(p.m, p.k / VEC);
  launch_kernel(quantize_scaled_kernel<T, VEC, MUL, ASYM>, grid, kBlockThreads, 0, p.stream, overlap, p);
}

// Asymmetric: static (any granularity the op allows) or dynamic per token.
template <typename T, int VEC, bool MUL>
void launch_asymmetric(const QuantizeParams& p) {
  if (p.scale_in != nullptr) return launch_scaled<T, VEC, MUL, true>(p, p.pdl);
  launch_token<T, VEC, MUL, true>(p);
}

// Rotated: dynamic symmetric per token or per group, x as 16-byte vectors, no multipliers (the
// op layer's checks and copy).
template <typename T, int VEC>
void launch_rotated(const QuantizeParams& p) {
  if constexpr (VEC > 1) {
    if (p.k % kScaleBlock == 0 && !p.asymmetric && p.scale_in == nullptr && p.channel_mul == nullptr) {
      if (p.granularity == QuantGranularity::kToken) return launch_token<T, VEC, false, false, true>(p);
      if (p.granularity == QuantGranularity::kGroup) return launch_group<T, VEC, false, true>(p);
    }
  }
  throw std::logic_error("tcgemm: the rotated quantization takes dynamic symmetric rows of whole blocks, as vectors");
}

// In the W4 K order with the rows' sums (QuantizeParams::w4_rowsum): vectors of 8, dynamic
// symmetric per token, K a multiple of kScaleBlock, rotated (no multipliers then) or not (the op
// layer's choice).
template <typename T, int VEC, bool MUL>
void launch_w4_order(const QuantizeParams& p) {
  if constexpr (VEC == 8) {
    if (p.k % kScaleBlock == 0 && !p.asymmetric && p.scale_in == nullptr &&
        p.granularity == QuantGranularity::kToken && p.q_stride_row % 16 == 0) {
      if (!p.rotate) return launch_token<T, VEC, MUL, false, false, true>(p);
      if constexpr (!MUL) return launch_token<T, VEC, false, false, true, true>(p);
    }
  }
  throw std::logic_error("tcgemm: the quantization into the W4 K order takes dynamic symmetric rows per token of "
                         "whole blocks, as vectors of 8 (rotated: without multipliers)");
}

template <typename T, int VEC, bool MUL>
void launch(const QuantizeParams& p) {
  if (p.w4_rowsum != nullptr) return launch_w4_order<T, VEC, MUL>(p);
  if (p.rotate) return launch_rotated<T, VEC>(p);
  if (p.asymmetric) return launch_asymmetric<T, VEC, MUL>(p);
  if (p.scale_in != nullptr) return launch_scaled<T, VEC, MUL, false>(p, p.pdl);
  switch (p.granularity) {
    case QuantGranularity::kTensor:
      TCGEMM_CUDA_CHECK(cudaMemsetAsync(p.workspace, 0, sizeof(unsigned int), p.stream));
      // A memset is not a kernel that could trigger an overlapped launch: plain launches here.
      amax_kernel<T, VEC, MUL><<<elementwise_grid(p.m, p.k / VEC), kBlockThreads, 0, p.stream>>>(p);
      TCGEMM_CHECK_LAUNCH();
      return launch_scaled<T, VEC, MUL, false>(p, /*overlap=*/false);
    case QuantGranularity::kToken:
      return launch_token<T, VEC, MUL, false>(p);
    case QuantGranularity::kGroup:
      return launch_group<T, VEC, MUL>(p);
  }
}

// 16-byte loads need an aligned base and row stride; K % VEC == 0 keeps every vector inside the
// row and the VEC-byte stores of q aligned (with its row stride).
template <typename T>
void launch_typed(const QuantizeParams& p) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vectorized =
      p.x_as_vectors() && reinterpret_cast<uintptr_t>(p.q) % kVec == 0 && p.q_stride_row % kVec == 0;
  const bool mul = p.channel_mul != nullptr;
  if (vectorized) return mul ? launch<T, kVec, true>(p) : launch<T, kVec, false>(p);
  mul ? launch<T, 1, true>(p) : launch<T, 1, false>(p);
}

}  // namespace

void launch_quantize(const QuantizeParams& p) {
  if (p.m <= 0 || p.k <= 0) return;
  switch (p.dtype) {
    case QuantDtype::kBFloat16:
      return launch_typed<__nv_bfloat16>(p);
    case QuantDtype::kFloat16:
      return launch_typed<__half>(p);
    case QuantDtype::kFloat32:
      return launch_typed<float>(p);
  }
}

}  // namespace tcgemm

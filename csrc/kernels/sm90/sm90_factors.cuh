// Per-block scales staged in shared memory for the sm90 consumers. For every K block of the ring,
// one of warps 1-3 of the producer warpgroup writes the tile's promotion factor of each row,
//   factor(row, kb) = scale_a(row, kb) * scale_b(tile's column block, kb),
// into its slot of kBM floats (one per tile row) and arrives on that K block's "full" barrier with
// its 32 lanes, so a consumer thread reads its rows' factors with one shared-memory load each
// instead of loading both scales from global memory and multiplying them on every K block.
// Factor slots: K block i of the ring's sequence uses slot i % kFactorSlots, which one warp owns.
// The warp rewrites its slot for block i once block i - kFactorSlots has been released: the
// consumers read a block's factors right after its "full" wait, before they release its ring
// slot, and every consumer lane arrives on "empty" so that its own read is ordered before the
// rewrite.
// Every tile of a promoting config lies in one 128-column block of the weight scales
// (kScaleBlock % kBN == 0), so with 128x128 weight blocks one scale_b per K block serves the whole
// tile; weight scales per column and K block need a config with column factors.
#pragma once

#include <cstdint>

#include "epilogue/block_scales.h"
#include "kernels/sm90/sm90_params.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/smem.cuh"

namespace tcgemm::sm90 {

// Arrivals on a K block's barriers besides the TMA thread's ("full") and the consumer warps'
// lane 0 ("empty"): with per-block scales every lane of the block's factor warp arrives on "full" and
// every consumer lane on "empty" (each orders its own plain shared-memory accesses).
constexpr int kFactorWarpArrivals = 32;
constexpr int kConsumerArrivalsPerWarp = 32;

// Warp 1 + j of the producer warpgroup, j < kFactorSlots: the factors of the K blocks g = j,
// j + kFactorSlots, ... of the block's sequence (every K block of every unit), all into slot j,
// each lane kBM / 32 consecutive rows (and, with column factors, kBN / 32 consecutive columns).
// `factors` is the .shared address of slot 0. With one warp per slot a warp's scale loads for its
// next K block have kFactorSlots K blocks of the ring's time to arrive (one warp staging every
// block waited out one load latency per K block).
//   row factors: scale_a(row, kb) * scale_b(the tile's 128-column block, kb), or scale_a(row, kb)
//     alone with column factors;
//   column factors (Cfg::kColumnFactors): scale_b(column, kb).
// A weight scale that does not depend on kb is 1 here (the epilogue applies it).
template <class Cfg, class Epi>
__device__ __forceinline__ void stage_factors(const Params& args, const Epi& epi, uint32_t factors, uint64_t* full,
                                              uint64_t* empty, int j, int lane) {
  constexpr int kRows = Cfg::kBM / 32;
  constexpr int kCols = Cfg::kColumnFactors ? Cfg::kBN / 32 : 0;
  constexpr int kSlots = Cfg::kFactorSlots;
  static_assert(kSlots >= 1, "the config has no factor slots: it is not built for per-block scales");
  static_assert(kSlots <= 3, "one factor warp per slot: warps 1-3 of the producer warpgroup");
  static_assert(kSlots <= Cfg::kStages, "a factor slot is rewritten only after its ring slot");
  static_assert(Cfg::kBM % 32 == 0 && Cfg::kBN % 32 == 0, "each lane stages whole rows and columns");
  RingPosition<Cfg::kStages> fill, freed;  // this warp's next K block g, and g - kSlots (its previous one)
  fill.advance(j);
  freed.advance(j);
  bool first = true;
  int next = j;   // sequence number of this warp's next K block
  int begin = 0;  // sequence number of the unit's first K block
  const uint32_t slot = factors + 4 * j * Cfg::kFactorSlotFloats;
  const uint32_t row_out = slot + 4 * lane * kRows;
  const uint32_t col_out = slot + 4 * (Cfg::kBM + lane * kCols);
  const int64_t a_step = epi.a_block_scales(0).stride_kb;
  const BlockScales b0 = epi.b_block_scales(0);
  const bool b_blocks = b0.ptr != nullptr;  // else scale_b waits for the epilogue
  const int64_t b_step = b0.stride_kb;
  const int units = args.sched.units();
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const WorkUnit w = args.sched.unit<Cfg::kGroupM>(unit);
    const int end = begin + (w.kb_end - w.kb_begin);
    if (next < end) {
      int kb = w.kb_begin + (next - begin);
      const float* a[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        a[r] = epi.a_block_scales(min(w.tile_m * Cfg::kBM + lane * kRows + r, args.m - 1)).ptr + kb * a_step;
      // Per-row factors: the tile's one scale_b; per-column factors: each column's.
      constexpr int kBs = Cfg::kColumnFactors ? kCols : 1;
      const float* b[kBs];
#pragma unroll
      for (int c = 0; c < kBs; ++c) {
        const int col = min(w.tile_n * Cfg::kBN + lane * kCols + c, args.n - 1);
        b[c] = b_blocks ? epi.b_block_scales(col).ptr + kb * b_step : nullptr;
      }
      for (; kb < w.kb_end; kb += kSlots, next += kSlots) {
        // The loads go out before the wait for the slot, which hides their latency.
        float f[kRows], sb[kBs];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          f[r] = *a[r];
          a[r] += kSlots * a_step;
        }
#pragma unroll
        for (int c = 0; c < kBs; ++c) {
          sb[c] = 1.0f;
          if (b_blocks) {
            sb[c] = *b[c];
            b[c] += kSlots * b_step;
          }
        }
        if (!first) {
          ptx::mbarrier_wait(&empty[freed.slot], freed.phase);
          freed.advance(kSlots);
        }
        first = false;
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          ptx::st_shared_b32(row_out + 4 * r, __float_as_uint(Cfg::kColumnFactors ? f[r] : f[r] * sb[0]));
#pragma unroll
        for (int c = 0; c < kCols; ++c) ptx::st_shared_b32(col_out + 4 * c, __float_as_uint(sb[c]));
        ptx::mbarrier_arrive(&full[fill.slot]);  // release: the stores above are seen by its waiters
        fill.advance(kSlots);
      }
    }
    begin = end;
  }
}

// A consumer thread's factors: the row factors of the K block being promoted (current) and of
// the one whose wgmma was just issued (next), for its rows row0 + 64 mi + 8 h of the tile; with
// column factors, those of its columns col0 + 8 j + {0, 1}, read from the current block's slot
// while promoting it.
template <class Cfg>
struct StagedFactors {
  uint32_t rows;     // .shared address of factor slot 0 at this thread's first row
  uint32_t cols;     // .shared address of factor slot 0 at this thread's first column factor
  int slot = 0;      // factor slot of the next K block to fetch
  int current_slot;  // factor slot of the current K block
  int next_slot;
  float current[Cfg::kMmaM][2];
  float next[Cfg::kMmaM][2];

  __device__ __forceinline__ StagedFactors(uint32_t factors, int row0, int col0)
      : rows(factors + 4 * row0), cols(factors + 4 * (Cfg::kBM + col0)) {}

  // After the "full" wait of the next K block (volatile: not hoisted above that wait).
  __device__ __forceinline__ void fetch() {
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        next[mi][h] = ptx::ld_shared_f32(rows + 4 * (slot * Cfg::kFactorSlotFloats + 64 * mi + 8 * h));
    next_slot = slot;
    slot = slot + 1 == Cfg::kFactorSlots ? 0 : slot + 1;
  }
  __device__ __forceinline__ void advance() {
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) current[mi][h] = next[mi][h];
    current_slot = next_slot;
  }
  // The current K block's column factors of columns col0 + 8 j and + 1 (column factors only).
  __device__ __forceinline__ float2 column_pair(int j) const {
    return ptx::ld_shared_v2_f32(cols + 4 * (current_slot * Cfg::kFactorSlotFloats + 8 * j));
  }
};

}  // namespace tcgemm::sm90

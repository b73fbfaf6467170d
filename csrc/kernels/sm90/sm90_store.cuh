// The sm90 kernel's epilogue stores: a consumer warp's accumulators through the epilogue functor
// to D, staged in shared memory and written by TMA, or by direct stores where TMA cannot
// describe D.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "epilogue/chunk_cols.cuh"
#include "epilogue/out_store.cuh"
#include "kernels/sm90/sm90_params.cuh"
#include "ptx/cache_policy.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"

namespace tcgemm::sm90 {

// Writes one thread's accumulator fragment: rows row0 and row0 + 8, columns col0 + 8j + {0, 1}.
template <int WN, class Epi>
__device__ __forceinline__ void store_fragment(const Params& args, const Epi& epi,
                                               const typename Epi::Acc (&acc)[WN / 2], int row0, int col0) {
  using Out = typename Epi::OutT;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= args.m) continue;
    Out* d_row = static_cast<Out*>(args.d) + static_cast<int64_t>(row) * args.ldd;
    const typename Epi::Row r = epi.row(row);
#pragma unroll
    for (int j = 0; j < WN / 8; ++j) {
      const int col = col0 + 8 * j;
      if (col >= args.n) continue;
      const typename Epi::Acc acc0 = acc[4 * j + 2 * h], acc1 = acc[4 * j + 2 * h + 1];
      const bool pair = col + 1 < args.n;
      if constexpr (Epi::kAddsPartials) {
        if (args.sched.split_k > 1) {
          // Every split adds its partial sum; dispatch prefilled D with epilogue(0).
          atomicAdd(d_row + col, epi.partial(acc0));
          if (pair) atomicAdd(d_row + col + 1, epi.partial(acc1));
          continue;
        }
      }
      const Out v0 = epi.full(acc0, r, epi.col(col), row, col);
      if (!pair) {
        d_row[col] = v0;
        continue;
      }
      const Out v1 = epi.full(acc1, r, epi.col(col + 1), row, col + 1);
      if (args.d_vec2) {
        store_pair_global(d_row + col, v0, v1);
      } else {
        d_row[col] = v0;
        d_row[col + 1] = v1;
      }
    }
  }
}

// Writes one warp's 16 x WN piece of the result through TMA, 128 bytes of columns (kCols) at a
// time, in two passes that keep the unrolled code small (it runs once per tile and must not
// thrash the instruction cache):
//   1. every lane stores epilogue.apply(its accumulators) into the staging buffer. Lane l holds
//      rows l/4 + {0, 8} and columns 8j + 2*(l%4) + {0, 1} of the warp's piece (ptx/wgmma.cuh);
//      the buffer is [16][128 bytes] with TMA's 128-byte swizzle (16-byte chunk c of row r at
//      chunk c ^ (r % 8)), which also keeps these stores free of bank conflicts;
//   2. only when the epilogue has a finish pass (the int32 epilogue's offsets or C term): each lane finishes 16 consecutive
//      elements of one row (C read row-wise), a plain loop.
// Lane 0 issues the copy and owns the warp's bulk groups; a buffer is refilled once the store
// issued from it two chunks earlier (counted across tiles in `chunks_issued`) has read it.
// With split-K the copy is a reduce-add onto D.
template <class Cfg, class Epi>
__device__ __forceinline__ void store_warp_tile(const Params& args, const Epi& epi, const CUtensorMap* map_d,
                                                const typename Epi::Acc (&acc)[Cfg::kAccRegs], uint8_t* staging,
                                                int row_base, int col_base, int lane, uint32_t& chunks_issued) {
  using Out = typename Epi::OutT;
  constexpr int kCols = Cfg::kEpiRowBytes / static_cast<int>(sizeof(Out));
  // Split-K: D was prefilled with the rest of the epilogue; each split adds its partial sum.
  const bool split = Epi::kAddsPartials && args.sched.split_k > 1;
  const bool finish = Epi::kHasFinish && !split && epi.needs_finish();
  const int xor_chunk = (lane / 4) % 8;  // r % 8 for both of this lane's rows
  const uint32_t staging_addr = ptx::smem_addr(staging);
  // Rows and columns past the edge of D are computed (TMA clips them): clamp what they load.
  typename Epi::Row rows[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) rows[h] = epi.row(min(row_base + lane / 4 + 8 * h, args.m - 1));
  // Column terms: loaded coalesced one chunk ahead, shuffled to the fragment lanes (chunk_cols.cuh).
  constexpr int kChunks = Cfg::kWN / kCols;
  ChunkCols<Epi, kCols> cols[2];
  cols[0].load(epi, col_base, args.n, lane);
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk, ++chunks_issued) {
    const ChunkCols<Epi, kCols>& here = cols[chunk % 2];
    if (chunk + 1 < kChunks) cols[(chunk + 1) % 2].load(epi, col_base + (chunk + 1) * kCols, args.n, lane);
    const uint32_t buffer = staging_addr + (chunks_issued % 2) * Cfg::kEpiBufferBytes;
    if (lane == 0) ptx::bulk_wait_group_read<1>();
    __syncwarp();
#pragma unroll
    for (int jj = 0; jj < kCols / 8; ++jj) {
      const int j = chunk * (kCols / 8) + jj;
      typename Epi::Col c0, c1;
      here.fragment_pair(jj, lane, c0, c1);
      const int byte_in_row = (8 * jj + 2 * (lane % 4)) * static_cast<int>(sizeof(Out));
      const int swizzled = (((byte_in_row >> 4) ^ xor_chunk) << 4) | (byte_in_row & 15);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = lane / 4 + 8 * h;
        store_pair_shared<Out>(buffer + r * Cfg::kEpiRowBytes + swizzled, epi.apply(acc[4 * j + 2 * h], rows[h], c0),
                               epi.apply(acc[4 * j + 2 * h + 1], rows[h], c1));
      }
    }
    if constexpr (Epi::kHasFinish) {
      if (finish) {
        __syncwarp();
        const int r = lane / 2;
        const int row = row_base + r;
#pragma unroll 1
        for (int i = 0; i < 4; ++i) {
          const int c16 = 4 * (lane % 2) + i;  // 16-byte chunk of the row: columns 4*c16 .. 4*c16 + 3
          const uint32_t addr = buffer + r * Cfg::kEpiRowBytes + ((c16 ^ (r % 8)) << 4);
          int4 v = ptx::ld_shared_v4(addr);
          const int col = col_base + chunk * kCols + 4 * c16;
          if (row < args.m) {
            if (col < args.n) v.x = epi.finish(v.x, row, col);
            if (col + 1 < args.n) v.y = epi.finish(v.y, row, col + 1);
            if (col + 2 < args.n) v.z = epi.finish(v.z, row, col + 2);
            if (col + 3 < args.n) v.w = epi.finish(v.w, row, col + 3);
          }
          ptx::st_shared_v4(addr, v);
        }
      }
    }
    ptx::fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) {
      // D is written once and read by no later tile: keep L2 for A and B.
      const uint64_t policy = ptx::l2_policy_evict_first();
      const void* src = staging + (buffer - staging_addr);
      if (split) {
        ptx::tma_reduce_add_2d(map_d, src, col_base + chunk * kCols, row_base, policy);
      } else {
        ptx::tma_store_2d(map_d, src, col_base + chunk * kCols, row_base, policy);
      }
      ptx::bulk_commit_group();
    }
  }
}

}  // namespace tcgemm::sm90

// The sm90 kernel's consumers: per ring slot, wait on "full", issue MmaM x 4 m64nWNk32 wgmma
// (K = 128 bytes), and once those have retired free the slot; then the epilogue of the tile.
//   cooperative configs split each tile between the warpgroups; ping-pong configs give
//     alternate tiles to the two warpgroups, taking turns on named barriers so one's epilogue
//     runs under the other's main loop;
//   per-block scales (Epi::kPromotes): each 128-deep K block's int32 partial sums are folded into
//     fp32 accumulators with that block's scales. Two int32 sets take the K blocks in turn, so
//     one block is promoted while the next one's wgmma run.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "epilogue/block_scales.h"
#include "kernels/sm90/sm90_factors.cuh"
#include "kernels/sm90/sm90_params.cuh"
#include "kernels/sm90/sm90_store.cuh"
#include "kernels/sm90/sm90_unpack.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace tcgemm::sm90 {

// One consumer warpgroup's view of the block: its piece of each tile, the ring, the epilogue.
template <class Cfg, class Mma, class Epi>
struct Consumer {
  using Acc = typename Epi::Acc;
  const Params& args;
  const Epi& epi;
  const CUtensorMap* map_d;
  uint64_t* full;
  uint64_t* empty;
  uint8_t* epi_buffers;
  int consumer, wg_m, wg_n, warp, lane;
  uint64_t desc_a0, desc_b0;
  RingPosition<Cfg::kStages> ring;  // where the next K block of the ring lies
  uint32_t chunks_issued = 0;       // this warp's epilogue TMA stores so far (staging buffer = count % 2)

  // b_tiles: the int8 B tiles (one per stage, or a packed B's kBInt8Tiles).
  __device__ __forceinline__ Consumer(const Params& args_, const Epi& epi_, const CUtensorMap* map_d_, uint8_t* a_tiles,
                                      uint8_t* b_tiles, uint8_t* epi_buffers_, uint64_t* full_, uint64_t* empty_)
      : args(args_), epi(epi_), map_d(map_d_), full(full_), empty(empty_), epi_buffers(epi_buffers_) {
    // Broadcast from lane 0: ptxas then knows these are warp-uniform and keeps the descriptor
    // arithmetic that depends on them in uniform registers.
    consumer = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0) - 1;
    wg_m = Cfg::kPingPong ? 0 : consumer / Cfg::kWgN;
    wg_n = Cfg::kPingPong ? 0 : consumer % Cfg::kWgN;
    warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32) % 4, 0);
    lane = threadIdx.x % 32;
    desc_a0 = ptx::wgmma_desc_k_major_sw128(a_tiles + wg_m * Cfg::kWgRows * Cfg::kBK);
    desc_b0 = ptx::wgmma_desc_k_major_sw128(b_tiles + wg_n * Cfg::kWN * Cfg::kBK);
  }

  __device__ __forceinline__ int col_base(const WorkUnit& w) const { return w.tile_n * Cfg::kBN + wg_n * Cfg::kWN; }
  __device__ __forceinline__ void wait_full(const RingPosition<Cfg::kStages>& at) const {
    ptx::mbarrier_wait(&full[at.slot], at.phase);
  }
  // Lane 0 frees the slot for the warp, or with per-block scales every lane: each has read the
  // slot's promotion factors with a plain shared load that its own arrival must order.
  __device__ __forceinline__ void release(int slot) const {
    static_assert(kConsumerArrivalsPerWarp == 32, "per-block: one arrival per lane");
    if (Epi::kPromotes || lane == 0) ptx::mbarrier_arrive(&empty[slot]);
  }

  // Issues the wgmma of one K block (ring slot; B from B tile b_tile, the slot's own by default)
  // into a set of accumulators.
  __device__ __forceinline__ void issue_block(int32_t (&into)[Cfg::kMmaM][Cfg::kAccRegs], int slot,
                                              bool accumulate, int b_tile = -1) const {
    ptx::wgmma_fence();
    const uint64_t desc_a = ptx::wgmma_desc_advance(desc_a0, slot * Cfg::kATileBytes);
    const uint64_t desc_b = ptx::wgmma_desc_advance(desc_b0, (b_tile < 0 ? slot : b_tile) * Cfg::kBTileBytes);
#pragma unroll
    for (int kk = 0; kk < Cfg::kBK / Cfg::kMmaK; ++kk) {
#pragma unroll
      for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
        Mma::mma(ptx::wgmma_desc_advance(desc_a, mi * 64 * Cfg::kBK + kk * Cfg::kMmaK),
                 ptx::wgmma_desc_advance(desc_b, kk * Cfg::kMmaK), into[mi], accumulate || kk > 0);
      }
    }
    ptx::wgmma_commit_group();
  }

  // The epilogue of this warpgroup's piece of tile w.
  __device__ __forceinline__ void store_tile(const WorkUnit& w, const Acc (&pieces)[Cfg::kMmaM][Cfg::kAccRegs]) {
    const int cols = col_base(w);
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
      const int row_base = w.tile_m * Cfg::kBM + wg_m * Cfg::kWgRows + 64 * mi;
      if (row_base >= args.m || cols >= args.n) continue;  // this piece lies outside D
      if (args.d_tma) {
        if (row_base + 16 * warp < args.m) {
          uint8_t* staging = epi_buffers + (consumer * 4 + warp) * 2 * Cfg::kEpiBufferBytes;
          store_warp_tile<Cfg>(args, epi, map_d, pieces[mi], staging, row_base + 16 * warp, cols, lane, chunks_issued);
        }
      } else {
        store_fragment<Cfg::kWN>(args, epi, pieces[mi], row_base + warp * 16 + lane / 4, cols + 2 * (lane % 4));
      }
    }
  }
};

// The int32 sums of each tile over its whole K range, then its epilogue.
// Ping-pong turns: warpgroup c waits on named barrier 1 + c before its main loop, and the other
// warpgroup arrives there when its own main loop has issued. Besides keeping the two main loops
// apart, this keeps a warpgroup from waiting on a ring slot two phases ahead of the barrier (the
// other warpgroup has waited on every K block before this tile's). Units never have an empty K
// range (the launcher makes every split non-empty).
template <class Cfg, class Mma, class Epi>
__device__ __forceinline__ void consume_tiles(Consumer<Cfg, Mma, Epi>& c) {
  int32_t acc[Cfg::kMmaM][Cfg::kAccRegs];
  const int my_units = c.args.sched.block_units();
  for (int nth = 0; nth < my_units; ++nth) {
    const WorkUnit w = c.args.sched.template block_unit<Cfg::kGroupM>(nth);
    if (Cfg::kPingPong && nth % 2 != c.consumer) {
      c.ring.advance(w.kb_end - w.kb_begin);  // the other warpgroup's tile
      continue;
    }
    if (Cfg::kPingPong && nth > 0) ptx::named_barrier_sync(1 + c.consumer, 256);
    int prev_slot = -1;
    for (int kb = w.kb_begin; kb < w.kb_end; ++kb, c.ring.advance()) {
      const int slot = c.ring.slot;
      c.wait_full(c.ring);
      c.issue_block(acc, slot, kb > w.kb_begin);
      // The group of the previous K block has retired: its slot can be refilled.
      ptx::wgmma_wait_group<1>(acc);
      if (prev_slot >= 0) c.release(prev_slot);
      prev_slot = slot;
    }
    if (Cfg::kPingPong && nth + 1 < my_units) ptx::named_barrier_arrive(1 + (1 - c.consumer), 256);
    ptx::wgmma_wait_group<0>(acc);
    c.release(prev_slot);
    c.store_tile(w, acc);
  }
}

// Per-block scales (no split-K). Every K block starts its wgmma from zero, so the block's K
// blocks, tile after tile, go into the two int32 sets in turn: a step issues the block after the
// current one into the other set and promotes the current one while those wgmma run, and a
// tile's epilogue runs while the next tile's first block does. The factors of each K block come
// from shared memory (kernels/sm90/sm90_factors.cuh), read right after its "full" wait. ptxas
// serializes every wgmma of the kernel when a wgmma or wait sits under a condition (C7518: the
// loop's exits and the branch around the promotion hold none), when the current set is read between issuing the
// next block and a wait_group 1 (C7514: hence wait_group 0 before the issue) or when the loop
// writes to accumulator registers (C7515). Measured on the H200: +18-22% against one set
// (docs/design/scaled.md).
template <class Cfg, class Mma, class Epi>
__device__ __forceinline__ void consume_tiles_promoting(Consumer<Cfg, Mma, Epi>& c, uint32_t factor_slots) {
  using Set = int32_t[Cfg::kMmaM][Cfg::kAccRegs];
  const int k_blocks = c.args.sched.k_blocks;
  const int total = c.args.sched.block_units() * k_blocks;  // K blocks of this block
  Set acc, acc_next;
  float accf[Cfg::kMmaM][Cfg::kAccRegs];
  StagedFactors<Cfg> factors(factor_slots, c.wg_m * Cfg::kWgRows + 16 * c.warp + c.lane / 4, 2 * (c.lane % 4));
  WorkUnit w;
  int nth = 0, kb = 0;  // the current block's unit and K block

  auto begin_tile = [&]() {
    w = c.args.sched.template block_unit<Cfg::kGroupM>(nth);
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) accf[mi][i] = 0.0f;
  };
  // Accumulator register i of an m64 piece: row + 8 ((i / 2) % 2), column 8 (i / 4) + i % 2.
  auto promote_block = [&](const Set& cur) {
    if constexpr (Cfg::kColumnFactors) {
#pragma unroll
      for (int j = 0; j < Cfg::kAccRegs / 4; ++j) {
        const float2 col = factors.column_pair(j);
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int i = 4 * j + r;
            accf[mi][i] = promote(accf[mi][i], cur[mi][i], factors.current[mi][r / 2] * (r % 2 ? col.y : col.x));
          }
      }
    } else {
#pragma unroll
      for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
        for (int i = 0; i < Cfg::kAccRegs; ++i)
          accf[mi][i] = promote(accf[mi][i], cur[mi][i], factors.current[mi][(i / 2) % 2]);
    }
  };
  // The row factors were read at the "full" wait; column factors are read during the promotion,
  // so then the K block's slot is released after it (the factor warp rewrites the factor slot
  // once the ring slot is free).
  auto release_before_promotion = [&](int slot) {
    if constexpr (!Cfg::kColumnFactors) c.release(slot);
  };
  auto release_after_promotion = [&](int slot) {
    if constexpr (Cfg::kColumnFactors) c.release(slot);
  };
  // Block (nth, kb) was issued into `cur` and is not the block's last: issue the next into
  // `next`, promote this one, and store the tile after its last K block.
  auto step = [&](Set& cur, Set& next) {
    const int slot = c.ring.slot;
    c.ring.advance();
    c.wait_full(c.ring);
    factors.fetch();
    ptx::wgmma_wait_group<0>(cur);
    c.issue_block(next, c.ring.slot, false);
    release_before_promotion(slot);
    // A branch ptxas cannot fold (every launch has m > 0) keeps the promotion out of the wgmma's
    // basic block: ptxas otherwise schedules it between them, and the tensor pipe holds one
    // 32-deep step of this warpgroup's block while the warp promotes (+2-5% per-block, H200).
    if (c.args.m > 0) promote_block(cur);
    release_after_promotion(slot);
    factors.advance();
    if (++kb == k_blocks) {
      c.store_tile(w, accf);
      kb = 0;
      ++nth;
      begin_tile();
    }
  };

  begin_tile();
  c.wait_full(c.ring);
  factors.fetch();
  factors.advance();
  c.issue_block(acc, c.ring.slot, false);
  // K block g of the block's sequence is in acc for even g, in acc_next for odd g.
  for (int g = 0; g + 1 < total; g += 2) {
    step(acc, acc_next);
    if (g + 2 == total) break;
    step(acc_next, acc);
  }
  ptx::wgmma_wait_group<0>(acc);
  ptx::wgmma_wait_group<0>(acc_next);
  const int last = c.ring.slot;
  release_before_promotion(last);
  c.ring.advance();
  if (total % 2 == 0) {  // the last block, total - 1, is odd
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) acc[mi][i] = acc_next[mi][i];
  }
  promote_block(acc);
  release_after_promotion(last);
  c.store_tile(w, accf);
}

// A packed 4-bit B (Cfg::kBInt4; no per-block scales, no ping-pong): right after the wgmma of K
// block g are issued, K block g + 1 of the block's sequence, whose packed pieces were read a step
// before, is unpacked into int8 tile (g + 1) % 2 while they run, the warpgroups of each unpacking
// group meet at their named barrier, and the pieces of g + 2 are read. The tile it overwrites was
// read by the wgmma of g - 1: each consumer warp arrives on the tile's `tile_free` mbarrier once
// its wait_group 1 after issuing g has seen them retire (that wait also frees g - 1's ring slot,
// as in consume_tiles), and the unpacking waits there for every warp's arrival. A warpgroup's own
// wait would not do where two warpgroups read the whole tile (kWgM 2): the other's wgmma of g - 1
// may still be reading it. The wait is mostly found complete.
template <class Cfg, class Mma, class Epi>
__device__ __forceinline__ void consume_tiles_unpacking(Consumer<Cfg, Mma, Epi>& c, BUnpacker<Cfg> unpacker,
                                                        uint64_t* tile_free) {
  static_assert(Cfg::kBInt4 && !Cfg::kPingPong && !Epi::kPromotes, "the unpacking main loop");
  static_assert(Cfg::kBInt8Tiles == 2, "K blocks alternate between two int8 tiles");
  int32_t acc[Cfg::kMmaM][Cfg::kAccRegs];
  const int my_units = c.args.sched.block_units();
  if (my_units == 0) return;
  // The K blocks of the block's sequence: `total` of them, block g in int8 tile g % 2.
  int total = 0;
  for (int nth = 0; nth < my_units; ++nth) {
    const WorkUnit w = c.args.sched.template block_unit<Cfg::kGroupM>(nth);
    total += w.kb_end - w.kb_begin;
  }
  RingPosition<Cfg::kStages> loaded;  // the ring position of the next block whose pieces to read
  int next = 0;                       // the sequence number of the next block to unpack
  // Unpacks block `next` (read already) once its tile is free, then reads the one after it.
  auto unpack_next = [&]() {
    // Tile next % 2 was last read by block next - 2, the (next / 2 - 1)-th completion of its barrier.
    if (next >= 2) ptx::mbarrier_wait(&tile_free[next % 2], static_cast<uint32_t>(next / 2 - 1) & 1u);
    unpacker.store(next % 2);
    if (++next < total) {
      c.wait_full(loaded);
      unpacker.load(loaded.slot);
      loaded.advance();
    }
  };
  c.wait_full(loaded);
  unpacker.load(loaded.slot);
  loaded.advance();
  unpack_next();
  int g = 0;  // the sequence number of the block issued next
  for (int nth = 0; nth < my_units; ++nth) {
    const WorkUnit w = c.args.sched.template block_unit<Cfg::kGroupM>(nth);
    int prev_slot = -1;
    for (int kb = w.kb_begin; kb < w.kb_end; ++kb, ++g, c.ring.advance()) {
      const int slot = c.ring.slot;
      c.issue_block(acc, slot, kb > w.kb_begin, g % 2);
      ptx::wgmma_wait_group<1>(acc);  // the block before this one has retired: its slot and tile are free
      if (prev_slot >= 0) c.release(prev_slot);
      if (g > 0 && c.lane == 0) ptx::mbarrier_arrive(&tile_free[(g - 1) % 2]);
      prev_slot = slot;
      if (next < total) unpack_next();
    }
    ptx::wgmma_wait_group<0>(acc);
    c.release(prev_slot);
    c.store_tile(w, acc);
  }
}

}  // namespace tcgemm::sm90

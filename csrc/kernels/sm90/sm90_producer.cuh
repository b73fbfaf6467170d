// The sm90 kernel's producer: one thread walks the block's work units and, for every 128-byte K
// block, waits until the ring slot is free ("empty" mbarrier), then has TMA copy the A and B
// boxes into it, landing on the slot's "full" mbarrier. A packed 4-bit B (Cfg::kBInt4) lands in
// the slot's packed tile, 64 bytes per row and K block, which the consumers unpack. A B that the
// kernel unpacks itself (`unpack`, sm90_unpack_ahead.cuh) is loaded once its piece is written.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "kernels/sm90/sm90_params.cuh"
#include "kernels/sm90/sm90_unpack_ahead.cuh"
#include "ptx/cache_policy.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"

namespace tcgemm::sm90 {

// unpack: where Cfg::kBUnpacks, B's pieces to wait for (sm90_unpack_ahead.cuh).
template <class Cfg>
__device__ __forceinline__ void produce(const Params& args, const UnpackAheadArg<Cfg>& unpack, const CUtensorMap* map_a,
                                        const CUtensorMap* map_b, uint8_t* a_tiles, uint8_t* b_tiles, uint64_t* full,
                                        uint64_t* empty) {
  // An operand box that other tiles read again (A along its tile row, B along its tile
  // column) stays in L2 (evict_last); one read by a single tile (B when M fits one tile row)
  // is streamed (evict_first). Measured: 64x8192x8192 381 -> 404 TOPS, 16x28672x8192 +5%.
  // (An explicit evict_normal policy made skinny problems 2-3x slower: docs/design/sm90.md.)
  const uint64_t keep = ptx::l2_policy_evict_last(), stream = ptx::l2_policy_evict_first();
  const uint64_t policy_a = args.sched.tiles_n == 1 ? stream : keep;
  const uint64_t policy_b = args.sched.tiles_m == 1 ? stream : keep;
  constexpr int kBBoxK = Cfg::kBInt4 ? Cfg::kBK / 2 : Cfg::kBK;  // the K block's bytes of a B row
  const uint32_t stage_bytes = args.a_box_rows * Cfg::kBK + Cfg::kBTmaTileBytes;  // TMA counts a box whole
  RingPosition<Cfg::kStages> ring;
  const int units = args.sched.units();
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const WorkUnit w = args.sched.unit<Cfg::kGroupM>(unit);
    for (int kb = w.kb_begin; kb < w.kb_end; ++kb, ring.advance()) {
      const int slot = ring.slot;
      ptx::mbarrier_wait(&empty[slot], ring.phase ^ 1);
      if constexpr (Cfg::kBUnpacks) {
        if (kb == w.kb_begin || kb * Cfg::kBK % kUnpackSegmentK == 0) wait_unpacked<Cfg>(unpack, w.tile_n, kb);
      }
      ptx::mbarrier_arrive_expect_tx(&full[slot], stage_bytes);
      ptx::tma_load_2d(a_tiles + slot * Cfg::kATileBytes, map_a, &full[slot], kb * Cfg::kBK, w.tile_m * Cfg::kBM, policy_a);
      ptx::tma_load_2d(b_tiles + slot * Cfg::kBTmaTileBytes, map_b, &full[slot], kb * kBBoxK, w.tile_n * Cfg::kBN, policy_b);
    }
  }
}

}  // namespace tcgemm::sm90

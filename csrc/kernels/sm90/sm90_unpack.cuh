// How the sm90 kernel's consumers unpack a packed 4-bit B (TileConfig::kBInt4): TMA brings each
// stage's B packed ([BN][64] bytes per K block, unswizzled); the consumer warpgroups write it as
// int8 (each 4-bit value times its row's group scale for the K block: common/int4.h), each group of
// those that read the same rows its own rows, into one of kBInt8Tiles int8 tiles, in the 128-byte
// swizzle that wgmma's descriptors read, while the wgmma of the K block before run
// (consume_tiles_unpacking, sm90_mainloop.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/int4.h"
#include "kernels/sm90/sm90_params.cuh"
#include "kernels/sm90/sm90_scheduler.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"

namespace tcgemm::sm90 {

// The named barriers at which the consumer warpgroups that read the same rows of B (the kWgM
// warpgroups of one wg_n) meet once their rows of a K block are unpacked: kUnpackBarrier + wg_n
// (ping-pong configs, which use 1 and 2, never read a packed B).
constexpr int kUnpackBarrier = 1;

// A packed B's K blocks alternate between its kBInt8Tiles int8 tiles: block g of the block's
// sequence (every K block of every unit, in order) is unpacked into tile g % kBInt8Tiles.
// Arrivals of the group-scale warp on a K block's "full" barrier: one per lane (each orders its own
// stores of the slot's scales).
constexpr int kGroupScaleArrivals = 32;

// f(std::integral_constant<int, i>{}) for a run-time i in [0, N): a register array indexed by
// run-time counts would live in local memory, so its elements are named by a constant instead.
template <int N, class F>
__device__ __forceinline__ void with_constant_index(int i, F&& f) {
  if constexpr (N > 0) {
    if (i == N - 1) return f(std::integral_constant<int, N - 1>{});
    with_constant_index<N - 1>(i, f);
  }
}

// Warp 1 of the producer warpgroup, with a packed B: the int8 group scales of each K block of the
// ring (1 without group scales, and for the rows past N) into the K block's slot of kBN bytes
// (`slots`, the .shared address of slot 0; lane l takes rows 4l .. 4l + 3 of the tile's kBN, as one
// 32-bit store per 128 rows), arriving on the K block's "full" barrier. The loads run kAhead K
// blocks ahead of the stores, which wait for the slot to be free. The consumers read a row's scale
// with one shared-memory load per K block instead of a global load of their own a K block ahead
// (measured the same speed, H200, docs/design/int4.md: the loads are off their chain).
template <class Cfg>
__device__ __forceinline__ void stage_group_scales(const Params& args, uint32_t slots, uint64_t* full,
                                                   uint64_t* empty, int lane) {
  constexpr int kWords = Cfg::kBN / 128;  // 32-bit words (4 rows) per lane
  constexpr int kAhead = 4;               // K blocks whose loads are on their way
  static_assert(Cfg::kBN % 128 == 0, "each lane stages 4 rows per 128 rows of the tile");
  RingPosition<Cfg::kStages> fill;
  uint32_t pending[kAhead][kWords];
  int loaded = 0, stored = 0;  // K blocks of the block's sequence whose scales were loaded, stored
  // Loads the scales of K block kb of column tile tile_n into pending[loaded % kAhead].
  auto load = [&](int tile_n, int kb) {
    with_constant_index<kAhead>(loaded++ % kAhead, [&](auto i) {
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        uint32_t word = 0;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = tile_n * Cfg::kBN + 128 * w + 4 * lane + r;
          const uint32_t s = args.b_group_scale != nullptr && row < args.n
                                 ? static_cast<uint8_t>(args.b_group_scale[row * args.b_group_scale_stride + kb])
                                 : 1u;
          word |= s << (8 * r);
        }
        pending[i][w] = word;
      }
    });
  };
  // Stores pending[stored % kAhead] into the next slot once it is free.
  auto store = [&]() {
    with_constant_index<kAhead>(stored++ % kAhead, [&](auto i) {
      ptx::mbarrier_wait(&empty[fill.slot], fill.phase ^ 1);
#pragma unroll
      for (int w = 0; w < kWords; ++w)
        ptx::st_shared_b32(slots + fill.slot * Cfg::kBN + 128 * w + 4 * lane, pending[i][w]);
      ptx::mbarrier_arrive(&full[fill.slot]);  // release: the stores above are seen by its waiters
      fill.advance();
    });
  };
  const int units = args.sched.units();
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const WorkUnit w = args.sched.unit<Cfg::kGroupM>(unit);
    for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
      if (loaded - stored == kAhead) store();
      load(w.tile_n, kb);
    }
  }
  while (stored < loaded) store();
}

// The consumer warpgroups of one wg_n (an unpacking group: the kWgM warpgroups that read the same
// kWN rows of B) unpack those rows. Group thread `thread` (0 .. kThreads - 1) takes the 16-byte
// packed pieces thread, thread + kThreads, ... of the group's rows of a K block: piece i is row
// i / 4 of them, values 32 (i % 4) .. + 31 of the block, which become the swizzle units 2 (i % 4)
// and 2 (i % 4) + 1 of that row. A warp reads 512 contiguous bytes and each quarter warp writes
// two rows' eight distinct units: no bank conflicts. Each row's group scale of the K block comes
// from the slot's group scales (stage_group_scales). A K block is read (load: its pieces and
// scales into registers) a step before it is converted and stored (store), so the shared-memory
// loads are on their way while the warps issue the wgmma of the block before.
template <class Cfg>
struct BUnpacker {
  static constexpr int kThreads = 128 * Cfg::kWgM;
  static constexpr int kPiecesPerRow = Cfg::kBK / 2 / 16;
  static constexpr int kPieces = Cfg::kWN * kPiecesPerRow;
  static constexpr int kPerThread = kPieces / kThreads;
  static_assert(Cfg::kBK == 128 && kPiecesPerRow == 4, "a K block is 128 values: 64 packed bytes per row");
  static_assert(kPieces % kThreads == 0, "every thread of a group unpacks the same number of pieces");

  uint32_t packed0, int8_0, scales0;
  int thread, row0, barrier;
  int4 in[kPerThread];         // the pieces of the K block loaded last
  uint32_t scale[kPerThread];  // and their rows' group scales

  // wg_m, wg_n: the warpgroup's place in the tile (Consumer); group_scales: the .shared address of
  // the group-scale slots.
  __device__ __forceinline__ BUnpacker(const uint8_t* packed_tiles, uint8_t* int8_tiles, uint32_t group_scales,
                                       int wg_m, int wg_n)
      : packed0(ptx::smem_addr(packed_tiles)),
        int8_0(ptx::smem_addr(int8_tiles)),
        scales0(group_scales),
        thread(wg_m * 128 + static_cast<int>(threadIdx.x % 128)),
        row0(wg_n * Cfg::kWN),
        barrier(kUnpackBarrier + wg_n) {}

  // Reads this thread's pieces of the K block in ring slot `slot` (landed) and their scales.
  __device__ __forceinline__ void load(int slot) {
    const uint32_t packed = packed0 + slot * Cfg::kBPackedTileBytes + row0 * (Cfg::kBK / 2);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = thread + j * kThreads;
      scale[j] = ptx::ld_shared_u8(scales0 + slot * Cfg::kBN + row0 + i / kPiecesPerRow);
      in[j] = ptx::ld_shared_v4(packed + 16 * i);
    }
  }

  // Writes the pieces loaded last, times their scales, as int8 into int8 tile `tile`, and meets
  // the group's other threads once all are written.
  __device__ __forceinline__ void store(int tile) const {
    const uint32_t b = int8_0 + tile * Cfg::kBTileBytes;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = thread + j * kThreads;
      const int row = row0 + i / kPiecesPerRow, unit = 2 * (i % kPiecesPerRow);
      uint32_t out[8];
      unpack_int4x8_scaled(static_cast<uint32_t>(in[j].x), scale[j], out[0], out[1]);
      unpack_int4x8_scaled(static_cast<uint32_t>(in[j].y), scale[j], out[2], out[3]);
      unpack_int4x8_scaled(static_cast<uint32_t>(in[j].z), scale[j], out[4], out[5]);
      unpack_int4x8_scaled(static_cast<uint32_t>(in[j].w), scale[j], out[6], out[7]);
      const uint32_t row_at = b + row * Cfg::kBK;
      ptx::st_shared_v4(row_at + 16 * (unit ^ (row % 8)), make_int4(out[0], out[1], out[2], out[3]));
      ptx::st_shared_v4(row_at + 16 * ((unit + 1) ^ (row % 8)), make_int4(out[4], out[5], out[6], out[7]));
    }
    ptx::fence_proxy_async_shared();  // these generic-proxy writes, before wgmma reads them
    ptx::named_barrier_sync(barrier, kThreads);  // the group's rows are written
  }
};

}  // namespace tcgemm::sm90

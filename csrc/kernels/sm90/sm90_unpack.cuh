// How the sm90 kernel's consumers unpack a packed 4-bit B (TileConfig::kBInt4): TMA brings each
// stage's B packed ([BN][64] bytes per K block, unswizzled); the two consumer warpgroups write it
// as int8 (each 4-bit value times its row's group scale for the K block: common/int4.h) into one
// of kBInt8Tiles int8 tiles, in the 128-byte swizzle that wgmma's descriptors read, while the
// wgmma of the K block before run (consume_tiles_unpacking, sm90_mainloop.cuh).
#pragma once

#include <cstdint>

#include "common/int4.h"
#include "kernels/sm90/sm90_params.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"

namespace tcgemm::sm90 {

// The named barrier at which the consumer warpgroups meet once a K block is unpacked (ping-pong
// configs, which use 1 and 2, never read a packed B).
constexpr int kUnpackBarrier = 1;

// The int8 B tile the consumers read for ring slot `slot`: the stage's own, or a packed B's.
template <class Cfg>
__device__ __forceinline__ int b_tile_of(int slot) {
  if constexpr (Cfg::kBInt4) {
    return slot % Cfg::kBInt8Tiles;
  } else {
    return slot;
  }
}

// Consumer thread `thread` (0 .. kThreads - 1) takes the 16-byte packed pieces thread,
// thread + kThreads, ... of a K block: piece i is row i / 4, values 32 (i % 4) .. + 31 of the
// block, which become the swizzle units 2 (i % 4) and 2 (i % 4) + 1 of that row. A warp reads 512
// contiguous bytes and each quarter warp writes two rows' eight distinct units: no bank conflicts.
template <class Cfg>
struct BUnpacker {
  static constexpr int kThreads = 128 * Cfg::kConsumerWarpgroups;
  static constexpr int kPiecesPerRow = Cfg::kBK / 2 / 16;
  static constexpr int kPieces = Cfg::kBN * kPiecesPerRow;
  static constexpr int kPerThread = kPieces / kThreads;
  static_assert(Cfg::kBK == 128 && kPiecesPerRow == 4, "a K block is 128 values: 64 packed bytes per row");
  static_assert(kPieces % kThreads == 0, "every consumer thread unpacks the same number of pieces");

  const Params& args;
  uint32_t packed0, int8_0;
  int thread;
  uint32_t scale[kPerThread];  // of the K block to unpack next

  __device__ __forceinline__ BUnpacker(const Params& args_, const uint8_t* packed_tiles, uint8_t* int8_tiles,
                                       int thread_)
      : args(args_), packed0(ptx::smem_addr(packed_tiles)), int8_0(ptx::smem_addr(int8_tiles)), thread(thread_) {}

  // The group scales of K block kb of tile column tile_n (1 without group scales, and for the
  // rows past N, which TMA fills with zeros).
  __device__ __forceinline__ void load_scales(int tile_n, int kb) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int row = tile_n * Cfg::kBN + (thread + j * kThreads) / kPiecesPerRow;
      scale[j] = args.b_group_scale != nullptr && row < args.n
                     ? static_cast<uint32_t>(args.b_group_scale[row * args.b_group_scale_stride + kb])
                     : 1u;
    }
  }

  // This thread's pieces of the K block in ring slot `slot` (landed), with the scales loaded for it.
  __device__ __forceinline__ void unpack(int slot) const {
    const uint32_t packed = packed0 + slot * Cfg::kBPackedTileBytes;
    const uint32_t b = int8_0 + b_tile_of<Cfg>(slot) * Cfg::kBTileBytes;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int i = thread + j * kThreads;
      const int4 in = ptx::ld_shared_v4(packed + 16 * i);
      const int row = i / kPiecesPerRow, unit = 2 * (i % kPiecesPerRow);
      uint32_t out[8];
      unpack_int4x8_scaled(static_cast<uint32_t>(in.x), scale[j], out[0], out[1]);
      unpack_int4x8_scaled(static_cast<uint32_t>(in.y), scale[j], out[2], out[3]);
      unpack_int4x8_scaled(static_cast<uint32_t>(in.z), scale[j], out[4], out[5]);
      unpack_int4x8_scaled(static_cast<uint32_t>(in.w), scale[j], out[6], out[7]);
      const uint32_t row_at = b + row * Cfg::kBK;
      ptx::st_shared_v4(row_at + 16 * (unit ^ (row % 8)), make_int4(out[0], out[1], out[2], out[3]));
      ptx::st_shared_v4(row_at + 16 * ((unit + 1) ^ (row % 8)), make_int4(out[4], out[5], out[6], out[7]));
    }
    ptx::fence_proxy_async_shared();  // these generic-proxy writes, before wgmma reads them
  }
};

}  // namespace tcgemm::sm90

// The portable WMMA kernel's tile config.
#pragma once

#include "epilogue/epilogues.h"

namespace tcgemm::wmma_gemm {

// Block tile BM x BN, K staged Chunk bytes at a time; warps laid out WarpsM x WarpsN, each holding
// a grid of 16x16 accumulator fragments. Every smem row is padded by kSkew bytes against bank
// conflicts (the classic immaTensorCoreGemm layout).
template <int BM, int BN, int Chunk, int WarpsM, int WarpsN>
struct TileConfig {
  static constexpr unsigned kEpilogues = kEpiInt32;
  static constexpr int kBM = BM;
  static constexpr int kBN = BN;
  static constexpr int kChunk = Chunk;
  static constexpr int kWarpsM = WarpsM;
  static constexpr int kWarpsN = WarpsN;
  static constexpr int kThreads = 32 * WarpsM * WarpsN;
  static constexpr int kFragsM = BM / WarpsM / 16;
  static constexpr int kFragsN = BN / WarpsN / 16;
  static constexpr int kSkew = 16;
  // A K-major tile is [BM][Chunk], an M-major one [Chunk][BM]: with BM == BN == Chunk one
  // square smem layout serves all four operand layouts.
  static constexpr int kTileDim = BM;
  static constexpr int kLds = kTileDim + kSkew;  // bytes between smem rows
  static constexpr int kTileBytes = kTileDim * kLds;
  static constexpr int kScratchLd = 20;  // int32 per row of a warp's 16x16 epilogue scratch (x4 bytes: 16B multiple)
  static constexpr int kScratchBytes = (kThreads / 32) * 16 * kScratchLd * 4;
  static constexpr int kSmemBytes = 2 * kTileBytes + kScratchBytes;
  static constexpr int kChunksPerThread = kTileDim * kTileDim / 16 / kThreads;

  static_assert(BM == BN && BN == Chunk, "one square staging tile serves every operand layout");
  static_assert(BM % (16 * WarpsM) == 0 && BN % (16 * WarpsN) == 0, "warps cover whole fragments");
  static_assert(Chunk % 16 == 0, "K chunks are whole wmma k-steps");
  static_assert(kLds % 16 == 0, "wmma int8 loads need a leading dimension that is a multiple of 16 bytes");
  static_assert((kTileDim * kTileDim / 16) % kThreads == 0, "a tile splits evenly into 16-byte copies");
  static_assert((2 * kTileBytes) % 32 == 0, "the epilogue scratch must be 256-bit aligned for store_matrix_sync");
};

// The classic WMMA block: 8 warps as 2x4, each a 4x2 grid of 16x16 fragments (64x32), K staged
// 128 bytes at a time. ~46 KiB of shared memory: no opt-in needed on any CUDA GPU.
using Config = TileConfig<128, 128, 128, 2, 4>;

}  // namespace tcgemm::wmma_gemm

// Compile-time shape of one sm90 (wgmma + TMA) kernel instantiation. Tile choices per regime
// live in dispatch/heuristics.h.
#pragma once

namespace tcgemm {

// A block is one producer warpgroup (TMA) and WgM x WgN consumer warpgroups (wgmma), each of
// which owns a 64 x WN piece of the BM x BN output tile (one m64nWNk32 wgmma per 32 K bytes).
// K advances 128 bytes per pipeline stage: one 128-byte swizzle row per operand row.
template <int WgM, int WgN, int WN, int Stages, int GroupM = 8>
struct Sm90TileConfig {
  static constexpr int kWgM = WgM, kWgN = WgN, kWN = WN;
  static constexpr int kConsumerWarpgroups = WgM * WgN;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kBM = 64 * WgM;
  static constexpr int kBN = WN * WgN;
  static constexpr int kBK = 128;
  static constexpr int kMmaK = 32;
  static constexpr int kStages = Stages;
  static constexpr int kGroupM = GroupM;  // rasterization: tile rows per group (L2 reuse of B)
  static constexpr int kAccRegs = WN / 2;

  static constexpr int kATileBytes = kBM * kBK;
  static constexpr int kBTileBytes = kBN * kBK;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;

  // Epilogue staging: each consumer warp writes its 16 x WN int32 rows 32 columns at a time (one
  // 128-byte swizzle row per output row) into one of its two buffers, and TMA stores it while
  // the warp fills the other and then goes on to its next tile. Per warp, so no barriers.
  static constexpr int kEpiRows = 16;
  static constexpr int kEpiCols = 32;
  static constexpr int kEpiBufferBytes = kEpiRows * kEpiCols * 4;
  static constexpr int kEpiBytes = kConsumerWarpgroups * 4 * 2 * kEpiBufferBytes;

  // Stages, epilogue buffers, then 2 mbarriers per stage; +1024 to align everything to the
  // 128-byte swizzle atom.
  static constexpr int kSmemBytes = kStages * kStageBytes + kEpiBytes + 2 * kStages * 8 + 1024;

  // setmaxnreg split of the 64K-register file: the producer needs few, the consumers hold
  // the accumulators.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 1 ? 240 : 232;

  static_assert(WN % 8 == 0 && WN >= 8 && WN <= 256, "wgmma N must be a multiple of 8 up to 256");
  static_assert(kBN <= 256 && kBM <= 256, "a TMA box holds at most 256 rows");
  static_assert(kATileBytes % 1024 == 0 && kBTileBytes % 1024 == 0, "tiles must keep 1024-byte alignment");
  static_assert(WN % kEpiCols == 0, "the epilogue stores whole 32-column chunks");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an H100/H200 block can have");
  static_assert(128 * kProducerRegs + 128 * kConsumerWarpgroups * kConsumerRegs <= 65536, "register file");
};

}  // namespace tcgemm

// Tile configuration of the mma.sync kernel; the concrete configs live in dispatch/heuristics.h.
#pragma once

namespace tcgemm {

// A block computes a BM x BN tile of D with WarpsM x WarpsN warps, streaming K through a
// Stages-deep cp.async ring of 128-byte K slices (one swizzle row per operand row). SplitK
// configs can also run a K range per blockIdx.y (GemmParams::split_k); the others compile
// without that bookkeeping, which cost the large tiles 13% at 4096^3 on the H200.
template <int BM, int BN, int WarpsM, int WarpsN, int Stages, bool SplitK = false>
struct Sm80TileConfig {
  static constexpr int kBM = BM;
  static constexpr int kBN = BN;
  static constexpr int kBK = 128;  // bytes of K per stage = 8 chunks of 16 bytes = 4 mma k-steps
  static constexpr int kWarpsM = WarpsM;
  static constexpr int kWarpsN = WarpsN;
  static constexpr int kStages = Stages;
  static constexpr bool kSplitK = SplitK;
  static constexpr int kThreads = 32 * WarpsM * WarpsN;
  static constexpr int kWarpTileM = BM / WarpsM;
  static constexpr int kWarpTileN = BN / WarpsN;
  static constexpr int kMmaM = kWarpTileM / 16;  // m16 tiles per warp
  static constexpr int kMmaN = kWarpTileN / 8;   // n8 tiles per warp
  static constexpr int kStageBytesA = BM * kBK;
  static constexpr int kStageBytesB = BN * kBK;
  static constexpr int kSmemBytes = Stages * (kStageBytesA + kStageBytesB);
  static constexpr int kGroupM = 8;  // tile rows per rasterization group, for L2 reuse of B

  static_assert(BM % (16 * WarpsM) == 0, "each warp covers whole m16 tiles");
  static_assert(BN % (16 * WarpsN) == 0, "each warp covers pairs of n8 tiles (one ldmatrix.x4)");
  static_assert((BM * kBK / 16) % kThreads == 0, "A stage splits evenly into 16-byte copies");
  static_assert((BN * kBK / 16) % kThreads == 0, "B stage splits evenly into 16-byte copies");
  static_assert(Stages >= 3, "at least three stages keep two loads in flight during compute");
};

}  // namespace tcgemm

// The mma.sync kernel's tile configs: the template, and the configs by regime that
// dispatch/plan.cpp chooses among (measured on the H200: docs/design/sm80.md).
#pragma once

#include "common/scale_layout.h"
#include "epilogue/epilogues.h"

namespace tcgemm::sm80 {

// A block computes a BM x BN tile of D with WarpsM x WarpsN warps, streaming K through a
// Stages-deep cp.async ring of 128-byte K slices (one swizzle row per operand row). SplitK
// configs can also run a K range per blockIdx.y (GemmProblem::split_k); the others compile
// without that bookkeeping, which cost the large tiles 13% at 4096^3 on the H200.
// Epilogues: the kEpi* families (epilogue/epilogues.h) the config is instantiated for.
template <int BM, int BN, int WarpsM, int WarpsN, int Stages, unsigned Epilogues, bool SplitK = false>
struct TileConfig {
  static constexpr unsigned kEpilogues = Epilogues;
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
  static_assert(!(Epilogues & kEpiPerBlock) || kBK == kScaleBlock, "a K slice must be one scale block");
};

// Large: 128x128 blocks of 4 warps (64x64 each), 3 stages, 96 KiB: two blocks share an SM, and
// their independent barriers beat one 8-warp 256x128 block (the cuBLAS shape) by 4-6%.
using Large = TileConfig<128, 128, 2, 2, 3, kEpiInt32 | kEpiScaled>;
// Small: problems that cannot give half the SMs a 128x128 block (small M, or small N and M);
// 64x64 blocks of 4 warps (32x32 each), 4 stages, 64 KiB. The only config that splits K.
using Small = TileConfig<64, 64, 2, 2, 4, kEpiInt32 | kEpiScaled | kEpiPerBlock, /*SplitK=*/true>;
// Per-block scaled GEMM, large problems: 128x128 blocks of 8 warps (64x32 each), 3 stages: the
// promoted fp32 accumulators double each warp's accumulator registers, so warp tiles halve.
using Block = TileConfig<128, 128, 2, 4, 3, kEpiPerBlock>;

}  // namespace tcgemm::sm80

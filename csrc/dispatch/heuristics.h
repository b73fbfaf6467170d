// Every tile choice of every backend, and the rules that pick one for a problem.
#pragma once

#include <algorithm>

#include "kernels/sm80/sm80_tile_config.h"
#include "kernels/sm90/sm90_tile_config.h"
#include "kernels/wmma/wmma_tile_config.h"

namespace tcgemm {

// The classic WMMA block: 8 warps as 2x4, each a 4x2 grid of 16x16 fragments (64x32), K staged
// 128 bytes at a time. ~46 KiB of shared memory: no opt-in needed on any CUDA GPU.
using WmmaConfig = WmmaTileConfig<128, 128, 128, 2, 4>;

// mma.sync tiles by regime (measured on the H200: benchmarks/NOTES-sm80.md).
// Large: 128x128 blocks of 4 warps (64x64 each), 3 stages, 96 KiB: two blocks share an SM, and
// their independent barriers beat one 8-warp 256x128 block (the cuBLAS shape) by 4-6%.
using Sm80Large = Sm80TileConfig<128, 128, 2, 2, 3>;
// Small: problems that cannot give half the SMs a 128x128 block (small M, or small N and M);
// 64x64 blocks of 4 warps (32x32 each), 4 stages, 64 KiB.
// The only config that splits K (see choose_sm80_split_k).
using Sm80Small = Sm80TileConfig<64, 64, 2, 2, 4, /*SplitK=*/true>;

// Per-block scaled GEMM, large problems: 128x128 blocks of 8 warps (64x32 each), 3 stages: the
// promoted fp32 accumulators double each warp's accumulator registers, so warp tiles halve.
using Sm80Block = Sm80TileConfig<128, 128, 2, 4, 3>;

// Skinny problems (few rows of A against a wide B: decode-time linear layers) stream B; the
// skinny kernel (kernels/skinny) reads it straight into registers with many K blocks in flight,
// on sm80 and sm90 alike. Taken when its 16-column blocks give every SM at least one, K is long
// enough that B dominates, and M <= 8, or M <= 16 with N <= 8192 against the sm80 kernels (wider
// B gives the tiles enough columns to stream as well), N <= 6144 against the sm90 kernels.
// H200, int8_gemm TOPS against the sm90 kernels (NOTES-sm90.md, step 11): M = 1 and 4
// 1.03-1.5x; M = 16 1.03-1.26x at N = 4096/8192, 0.91-0.95x at N = 14336/28672; M = 32 0.6-0.9x.
// Since the sm90 kernel's A boxes were cut to M's rows (step 14), same runs with cuBLASLt:
// M = 1 and 4 1.06-1.3x at N <= 8192, 0.97-1.02x at N = 14336/28672; M = 8 at N = 8192 1.02x;
// M = 16 at N = 4096 1.19x, but at N = 8192 0.95-0.98x (sm90 89.5-92.0, skinny 87.3-87.7, cuBLASLt
// 88.4-88.9) and M = 12 0.98-0.99x: the 9-16 row bound sits between the two measured widths.
inline bool choose_skinny(int m, int n, int k, int sm_count, bool vs_sm90) {
  const bool few_rows = m <= 8 || (m <= 16 && n <= (vs_sm90 ? 6144 : 8192));
  return few_rows && (n + 15) / 16 >= sm_count && k >= 512;
}

// The skinny block's tile of D: m16 tiles of rows x n8 tiles of columns (a forced skinny backend
// takes any M). At 9-16 rows, 32 columns per block when that still gives every SM its two block
// slots (N >= ~7.9K on 132 SMs; reached through sm80 and the forced skinny backend): each K
// block of A a warp loads then feeds twice as many mma.
// H200 (NOTES-sm90.md step 14), 16 vs 32 columns, TOPS: 16x8192x8192 87.4 vs 89.1-90.0,
// 16x28672x8192 107.3 vs 111.2-111.5; at M = 1 and 4 the wider blocks lost up to 10% (fewer
// blocks, little A to share), and narrower B needs 16 columns to fill the SMs.
enum class SkinnyTile { kRows16Cols16, kRows16Cols32, kRows32Cols16 };

inline SkinnyTile choose_skinny_tile(int m, int n, int sm_count) {
  if (m > 16) return SkinnyTile::kRows32Cols16;
  const long long wide_blocks = (n + 31) / 32;
  return m > 8 && 8 * wide_blocks >= 15LL * sm_count ? SkinnyTile::kRows16Cols32 : SkinnyTile::kRows16Cols16;
}

enum class Sm80Tile { kLarge, kSmall };

inline Sm80Tile choose_sm80_tile(int m, int n, int sm_count, int smem_optin) {
  const long long large_tiles = static_cast<long long>((m + Sm80Large::kBM - 1) / Sm80Large::kBM) *
                                ((n + Sm80Large::kBN - 1) / Sm80Large::kBN);
  // One 128x128 block on each of half the SMs still beats four times as many 64x64 blocks
  // (H200: 512x4096x4096 and 256x8192x28672, 128 blocks on 132 SMs).
  if (smem_optin >= Sm80Large::kSmemBytes && 2 * large_tiles >= sm_count) return Sm80Tile::kLarge;
  return Sm80Tile::kSmall;
}

// Split-K when the tiles alone leave more than half the SMs idle (tiny M, or tiny M and N):
// enough K splits for about two blocks per SM, each keeping at least 4 K slices so its
// pipeline fills. Measured on the H200: 1x4096x4096 1.9 -> 2.4 TOPS, 16x4096x4096 32 -> 41;
// at 128-512 rows (about one wave of tiles) splitting lost 20-30% to the atomics and the fill.
inline int choose_sm80_split_k(Sm80Tile tile, int m, int n, int k, int sm_count) {
  if (tile != Sm80Tile::kSmall) return 1;
  const long long tiles = static_cast<long long>((m + Sm80Small::kBM - 1) / Sm80Small::kBM) *
                          ((n + Sm80Small::kBN - 1) / Sm80Small::kBN);
  if (2 * tiles > sm_count) return 1;
  const long long wanted = (2LL * sm_count + tiles - 1) / tiles;
  const long long most = ((k + Sm80Small::kBK - 1) / Sm80Small::kBK) / 4;
  return static_cast<int>(std::max(1LL, std::min({wanted, most, 16LL})));
}

// wgmma + TMA tiles by regime (sm_90a; measured on the H200: benchmarks/NOTES-sm90.md).
// Large: 128x256, two cooperative consumer warpgroups of 64x256, 4 stages of 48 KiB.
using Sm90Large = Sm90TileConfig<128, 256, 2, 1, 4>;
// Ping-pong: 128x128 tiles, each consumer warpgroup computes whole tiles (2 x m64n128) in turn,
// 6 stages of 32 KiB: one warpgroup's epilogue hides under the other's main loop.
using Sm90PingPong = Sm90TileConfig<128, 128, 1, 1, 6, /*PingPong=*/true>;
// (A cooperative 128x128 config measured the same as ping-pong 128x128 at M = 128 and 256,
// 463 vs 460 and 1000 vs 986 TOPS, and was dropped.)
// Small M (<= 64 rows): 64x128, two consumer warpgroups of 64x64 side by side, 8 stages of 24 KiB;
// these problems stream B, so the deep ring matters more than the MMA shape.
using Sm90Small = Sm90TileConfig<64, 128, 1, 2, 8>;
// Tiny: 64x64, one consumer warpgroup, 12 stages of 16 KiB: twice the tiles of Small, so that
// skinny problems fill the SMs without splitting K.
using Sm90Tiny = Sm90TileConfig<64, 64, 1, 1, 12>;

// Per-block scaled GEMM (1x128 x 128x128 scales), large problems: 128x128, two cooperative
// consumer warpgroups of 64x128, 6 stages of 32 KiB. Promotion needs an int32 and an fp32 set of
// accumulators (128 registers for 64x128), which rules out 256-wide and 128-row warpgroup pieces.
using Sm90Block = Sm90TileConfig<128, 128, 2, 1, 6>;

enum class Sm90Tile { kLarge, kPingPong, kSmall, kTiny, kBlock };

struct Sm90Plan {
  Sm90Tile tile = Sm90Tile::kLarge;
  int split_k = 1;
};

// Picks tile and K split by a cost model in units of one 128x128x128 MAC block on one SM:
//   waves(units) x per-unit cost, per-unit cost = tile area x K blocks per split x the config's
//   relative cost per MAC, plus ~32 K blocks for a split's prefill kernel and TMA reduce-adds.
// The per-MAC factors stand for what waves miss: small tiles issue narrower wgmma and, on
// skinny problems, the run is bound by streaming B, which fewer, larger tiles do as well.
// Fitted to H200 runs (benchmarks/NOTES-sm90.md), e.g. TOPS at
//   128x8192x8192: 64x128 unsplit 702, 64x64 654, 128x128 615, 64x128 split 2 515;
//   256x8192x8192: 128x128 1000, 64x128 882, 128x256 split 2 684;
//   64x8192x8192: 64x64 unsplit 377, 64x128 unsplit 366, either split 2 ~310;
//   16x28672x8192: 64x128 116, 64x64 87.
// Ping-pong 128x128 beats cooperative 128x256 by 2-6% when K <= 4096 (short main loops, the
// epilogue exposed) and loses 2-7% at K >= 8192.
// Splits are tried only while the tiles alone leave more than half the SMs idle.
namespace detail {

constexpr double kSm90SplitPenaltyBlocks = 32.0;

// Tries every split of one config (while allowed) and keeps the cheapest plan so far.
// split_sms: splits are tried while 2 * tiles <= split_sms (0: never split).
template <class Cfg>
inline void sm90_consider(Sm90Tile tile, double per_mac, int m, int n, int k, int split_sms, Sm90Plan* best,
                          double* best_cost, int sm_count) {
  const long long tiles = static_cast<long long>((m + Cfg::kBM - 1) / Cfg::kBM) * ((n + Cfg::kBN - 1) / Cfg::kBN);
  const long long k_blocks = (static_cast<long long>(k) + Cfg::kBK - 1) / Cfg::kBK;
  const double area = static_cast<double>(Cfg::kBM) * Cfg::kBN / (128.0 * 128.0);
  for (int split = 1; split <= 16; ++split) {
    if (split > 1 && (2 * tiles > split_sms || k_blocks / split < 4)) break;
    const long long per_split = (k_blocks + split - 1) / split;
    const long long units = tiles * ((k_blocks + per_split - 1) / per_split);
    // Ping-pong blocks run their two warpgroups' tiles one after the other: a block is a slot.
    const long long waves = (units + sm_count - 1) / sm_count;
    const double penalty = split > 1 ? kSm90SplitPenaltyBlocks : 0.0;
    const double cost = static_cast<double>(waves) * area * per_mac * (static_cast<double>(per_split) + penalty);
    if (cost < *best_cost) {
      *best_cost = cost;
      *best = Sm90Plan{tile, split};
    }
  }
}

}  // namespace detail

// Split-K applies to the int32 GEMM only (allow_split); the scaled GEMM's outputs are rounded
// once, after the whole K sum, so its plans never split.
inline Sm90Plan choose_sm90_plan(int m, int n, int k, int sm_count, bool allow_split = true) {
  Sm90Plan best;
  double best_cost = 1e300;
  const int splits = allow_split ? sm_count : 0;  // sm90_consider splits only while 2 * tiles <= this
  detail::sm90_consider<Sm90Large>(Sm90Tile::kLarge, 1.0, m, n, k, splits, &best, &best_cost, sm_count);
  detail::sm90_consider<Sm90PingPong>(Sm90Tile::kPingPong, k <= 4096 ? 0.97 : 1.04, m, n, k, splits, &best,
                                      &best_cost, sm_count);
  detail::sm90_consider<Sm90Small>(Sm90Tile::kSmall, 1.3, m, n, k, splits, &best, &best_cost, sm_count);
  detail::sm90_consider<Sm90Tiny>(Sm90Tile::kTiny, 2.2, m, n, k, splits, &best, &best_cost, sm_count);
  return best;
}

// Per-block scales: the configs that can promote (Sm90TileConfig::kSupportsPerBlock), no split.
// The 128x128 block config's per-MAC factor is a first estimate (narrower wgmma than Large).
inline Sm90Plan choose_sm90_block_plan(int m, int n, int k, int sm_count) {
  Sm90Plan best;
  double best_cost = 1e300;
  detail::sm90_consider<Sm90Block>(Sm90Tile::kBlock, 1.1, m, n, k, 0, &best, &best_cost, sm_count);
  detail::sm90_consider<Sm90Small>(Sm90Tile::kSmall, 1.3, m, n, k, 0, &best, &best_cost, sm_count);
  detail::sm90_consider<Sm90Tiny>(Sm90Tile::kTiny, 2.2, m, n, k, 0, &best, &best_cost, sm_count);
  return best;
}

}  // namespace tcgemm

// Every tile choice of every backend, and the rules that pick one for a problem.
#pragma once

#include <algorithm>

#include "kernels/sm80/sm80_tile_config.h"
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

}  // namespace tcgemm

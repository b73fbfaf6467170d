// Every tile choice of every backend, and the rules that pick one for a problem.
#pragma once

#include "kernels/sm80/sm80_tile_config.h"
#include "kernels/wmma/wmma_tile_config.h"

namespace tcgemm {

// The classic WMMA block: 8 warps as 2x4, each a 4x2 grid of 16x16 fragments (64x32), K staged
// 128 bytes at a time. ~46 KiB of shared memory: no opt-in needed on any CUDA GPU.
using WmmaConfig = WmmaTileConfig<128, 128, 128, 2, 4>;

// mma.sync tiles by regime. Large: big M and N, 8 warps of 64x64 (144 KiB: A100/H100-class smem).
using Sm80Large = Sm80TileConfig<256, 128, 4, 2, 3>;
// Mid: fewer tiles or consumer Ampere/Ada (<= 99 KiB smem); 8 warps of 64x32, 96 KiB.
using Sm80Mid = Sm80TileConfig<128, 128, 2, 4, 3>;
// Small: M <= 64-ish problems where big tiles would leave most SMs idle; 4 warps of 32x32, 64 KiB.
using Sm80Small = Sm80TileConfig<64, 64, 2, 2, 4>;

enum class Sm80Tile { kLarge, kMid, kSmall };

// Largest tile that still gives every SM a block and fits the device's shared memory.
inline Sm80Tile choose_sm80_tile(int m, int n, int sm_count, int smem_optin) {
  auto tiles = [&](int bm, int bn) { return static_cast<long long>((m + bm - 1) / bm) * ((n + bn - 1) / bn); };
  if (smem_optin >= Sm80Large::kSmemBytes && tiles(Sm80Large::kBM, Sm80Large::kBN) >= sm_count) return Sm80Tile::kLarge;
  if (smem_optin >= Sm80Mid::kSmemBytes && tiles(Sm80Mid::kBM, Sm80Mid::kBN) >= sm_count) return Sm80Tile::kMid;
  return Sm80Tile::kSmall;
}

}  // namespace tcgemm

// The persistent tile scheduler of the sm90 kernel: work units are output tiles in grouped order
// (GroupM tile rows per group, for L2 reuse of B; 0: all of them, a column tile at a time) times
// split_k ranges of K blocks. Units go round-robin to the gridDim.x <= #SMs resident blocks, and
// every role of a block walks the same sequence, so the ring's counters stay in step.
#pragma once

#include <cstdint>

namespace tcgemm::sm90 {

// One unit of work: an output tile and its range of K blocks.
struct WorkUnit {
  int tile_m, tile_n;
  int kb_begin, kb_end;
};

struct TileScheduler {
  int tiles_m, tiles_n;
  int k_blocks;        // ceil(K / 128)
  int k_blocks_split;  // K blocks per split (the last split may have fewer; none is empty)
  int split_k;

  __device__ __forceinline__ int units() const { return tiles_m * tiles_n * split_k; }

  template <int GroupM>
  __device__ __forceinline__ WorkUnit unit(int u) const {
    const int tiles = tiles_m * tiles_n;
    const int split = u / tiles;  // concurrent blocks share a K range: their A and B rows overlap in L2
    const int tile = u - split * tiles;
    const int group_m = GroupM > 0 ? GroupM : tiles_m;  // 0: every tile row of a column tile
    const int group_size = group_m * tiles_n;
    const int group = tile / group_size;
    const int first_m = group * group_m;
    const int rows_in_group = min(tiles_m - first_m, group_m);
    const int in_group = tile - group * group_size;
    WorkUnit w;
    w.tile_m = first_m + in_group % rows_in_group;
    w.tile_n = in_group / rows_in_group;
    w.kb_begin = split * k_blocks_split;
    w.kb_end = min(k_blocks, w.kb_begin + k_blocks_split);
    return w;
  }

  // This block's units: the nth is unit blockIdx.x + nth * gridDim.x.
  __device__ __forceinline__ int block_units() const {
    return (units() - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  }
  template <int GroupM>
  __device__ __forceinline__ WorkUnit block_unit(int nth) const {
    return unit<GroupM>(static_cast<int>(blockIdx.x) + nth * static_cast<int>(gridDim.x));
  }
};

// A position in the ring of Stages shared-memory slots: the slot of the next K block and the
// parity of its fill. The producer and the consumers walk the same sequence of K blocks, so
// their positions agree; slot and parity are kept rather than recomputed from a count (a
// division by a Stages that is not a power of two on every K block).
template <int Stages>
struct RingPosition {
  int slot = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance() {
    if (++slot == Stages) {
      slot = 0;
      phase ^= 1u;
    }
  }
  __device__ __forceinline__ void advance(int blocks) {  // blocks >= 0
    const int to = slot + blocks;
    phase ^= static_cast<uint32_t>(to / Stages) & 1u;
    slot = to % Stages;
  }
};

}  // namespace tcgemm::sm90

// The column terms (Epi::Col: a scale, a bias) of one epilogue chunk, loaded once per chunk with
// coalesced loads and handed to the lanes that need them by warp shuffles.
//
// A wgmma accumulator fragment gives lane l the columns 8j + 2(l%4) + {0, 1} of its piece, so
// asking for each element's column term directly costs every lane 2 loads (and their index
// arithmetic) per 8 columns, each latency exposed before the chunk's stores. Here lane l loads
// the kCols/32 consecutive columns kCols/32 * l + e of the chunk instead, and a fragment's pair
// comes from its owner lane.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tcgemm {

// v (any trivially copyable type made of 32-bit words) as held by lane `src` of the warp. Every
// lane of the warp must call it.
template <class T>
__device__ __forceinline__ T shfl_words(const T& v, int src) {
  static_assert(sizeof(T) % 4 == 0 && std::is_trivially_copyable_v<T>, "shuffles whole 32-bit words");
  uint32_t w[sizeof(T) / 4];
  memcpy(w, &v, sizeof(T));
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) w[i] = __shfl_sync(0xffffffffu, w[i], src);
  T out;
  memcpy(&out, w, sizeof(T));
  return out;
}

template <class Epi, int kCols>
struct ChunkCols {
  using Col = typename Epi::Col;
  static constexpr bool kEmpty = std::is_empty_v<Col>;  // the int32 epilogue loads nothing per column
  static constexpr int kPerLane = kCols / 32;
  static_assert(kCols % 32 == 0 && (kPerLane == 1 || kPerLane == 2), "fragment pairs map onto 1 or 2 columns per lane");

  Col own[kPerLane];  // columns kPerLane * lane + e of the chunk

  // Columns col0 .. col0 + kCols - 1 (those past n - 1 load column n - 1: kernels clip them).
  __device__ __forceinline__ void load(const Epi& epi, int col0, int n, int lane) {
    if constexpr (!kEmpty) {
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) own[e] = epi.col(min(col0 + kPerLane * lane + e, n - 1));
    }
  }

  // The terms of the chunk's columns 8 * jj + 2 * (lane % 4) + {0, 1}. Warp-wide.
  __device__ __forceinline__ void fragment_pair(int jj, int lane, Col& c0, Col& c1) const {
    if constexpr (kEmpty) {
      c0 = c1 = Col{};
    } else if constexpr (kPerLane == 2) {
      const int owner = 4 * jj + lane % 4;
      c0 = shfl_words(own[0], owner);
      c1 = shfl_words(own[1], owner);
    } else {
      const int owner = 8 * jj + 2 * (lane % 4);
      c0 = shfl_words(own[0], owner);
      c1 = shfl_words(own[0], owner + 1);
    }
  }
};

}  // namespace tcgemm

// What the sm90 kernel gets besides its tensor maps and the epilogue functor.
#pragma once

#include <cstdint>

#include "kernels/sm90/sm90_scheduler.cuh"

namespace tcgemm::sm90 {

struct Params {
  int m, n;
  TileScheduler sched;
  int a_box_rows;  // rows of A a stage loads: BM, or M rounded up to 8 when M < BM (rest zero)
  void* d;         // [M, N] of the epilogue's OutT, unit stride along N
  int64_t ldd;
  bool d_vec2;     // column pairs of D are aligned: they go out as one store
  bool d_tma;      // D is written through its tensor map (TMA reduce-add with split-K)
  // Packed 4-bit B (TileConfig::kBInt4): its int8 group scale of row n and K block kb at
  // b_group_scale[n * b_group_scale_stride + kb], or none (every scale 1).
  const int8_t* b_group_scale;
  int64_t b_group_scale_stride;
};

}  // namespace tcgemm::sm90

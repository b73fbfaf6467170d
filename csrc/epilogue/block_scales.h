// Per-block promotion, shared by the kernels whose epilogue has kPromotes: every 128-deep K
// block's exact int32 partial sums are folded into fp32 accumulators with that block's scales.
#pragma once

#include <climits>
#include <cstdint>
#include <type_traits>

#include "common/hd.h"
#include "common/scale_layout.h"

namespace tcgemm {

// accf + partial * scale: one K block's exact partial sum folded into the fp32 accumulator.
// float(partial) is exact (|partial| <= 128 * 128 * 128 = 2^21 for a 128-deep int8 x int8 block)
// and compiles to one I2FP on sm_90: measured on the H200 1-5% faster per-block than the
// 1.5 * 2^23 magic-number conversion (one integer and one float add), docs/design/scaled.md.
TCGEMM_HD float promote(float accf, int32_t partial, float scale) {
  return accf + static_cast<float>(partial) * scale;
}

// The scales of one row (or column) by K block: ptr[kb * stride_kb]. A null ptr stands for scales
// that do not depend on the K block (the epilogue applies them): their factor is 1 here.
struct BlockScales {
  const float* ptr = nullptr;
  int64_t stride_kb = 0;
};

#if defined(__CUDACC__)
// Promotion of an mma.sync accumulator tile (the sm80 and skinny kernels): MmaM m16 tiles by
// MmaN n8 tiles whose fragment register r of lane (g, t) = (lane / 4, lane % 4) holds row
// row0 + 16 i + g + 8 (r / 2) and column col0 + 8 j + 2 t + r % 2. Slots > 1 (the skinny
// kernel's B scales per 128 / Slots inputs): the tile's row r is instead slot r % Slots, the sums
// over group r % Slots of each K block, of row row0 + r / Slots of D, and GroupT the table's
// element: float, or the 16-bit ScaleDtype::kBf16 / kF16 as Bf16Bits / F16Bits, whose bits are
// loaded with the K block's other scales and decoded only in promote_into, after the K block's B
// has been waited for (a conversion next to the load waits on it: one row of groups of 32 took
// 1.6x as long).
template <int MmaM, int MmaN, int Slots = 1, class GroupT = float>
struct MmaSyncPromotion {
  static constexpr bool kHalfTable = Slots > 1 && !std::is_same_v<GroupT, float>;
  static_assert(std::is_same_v<GroupT, float> || (kHalfTable && HalfScaleBits<GroupT>::kIs16Bit),
                "group scales: an fp32 or a 16-bit table");
  float rows[MmaM][2];  // scale_a of rows + 0 and + 8 of each m16 tile
  // The K-block (or group) part of scale_b of the lane's two columns of each n8 tile.
  float cols[kHalfTable ? 1 : MmaN][2];
  uint32_t col_bits[kHalfTable ? MmaN : 1][2];  // a 16-bit table's: the bits as stored, zero-extended

  // The scales of K block kb; rows and columns past the edges of D clamp to the last one, groups
  // (Slots > 1) to last_group, the last of K.
  template <class Epi>
  TCGEMM_HD void load(const Epi& epi, int row0, int col0, int m, int n, int lane, int kb, int last_group = INT_MAX) {
    const int g = lane >> 2, t = lane & 3;
    const int b_index = Slots == 1 ? kb : min_int(kb * Slots + g % Slots, last_group);
#pragma unroll
    for (int i = 0; i < MmaM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        rows[i][h] = epi.a_block_scale(min_int(row0 + (i * 16 + g + 8 * h) / Slots, m - 1), kb);
#pragma unroll
    for (int j = 0; j < MmaN; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = min_int(col0 + j * 8 + 2 * t + e, n - 1);
        if constexpr (kHalfTable) {
          col_bits[j][e] = epi.b_group_scale_bits16(col, b_index);
        } else {
          cols[j][e] = epi.b_block_scale(col, b_index);
        }
      }
  }

  TCGEMM_HD void promote_into(float (&accf)[MmaM][MmaN][4], const int32_t (&acc)[MmaM][MmaN][4]) const {
#pragma unroll
    for (int i = 0; i < MmaM; ++i)
#pragma unroll
      for (int j = 0; j < MmaN; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          accf[i][j][r] = promote(accf[i][j][r], acc[i][j][r], rows[i][r / 2] * col(j, r % 2));
  }

 private:
  TCGEMM_HD float col(int j, int e) const {
    if constexpr (kHalfTable) {
      return HalfScaleBits<GroupT>::value(static_cast<uint16_t>(col_bits[j][e]));
    } else {
      return cols[j][e];
    }
  }
  TCGEMM_HD static int min_int(int x, int y) { return x < y ? x : y; }
};
#endif

}  // namespace tcgemm

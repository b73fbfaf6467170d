// A packed 4-bit B that the sm90 kernel unpacks itself (GemmProblem::b_unpack): what the launcher
// tells the kernel, and what the binding layer must provide. The device side, and why, is
// sm90_unpack_ahead.cuh.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common/problem.h"

namespace tcgemm::sm90 {

// A flag covers one column tile's rows over a segment of K: 8 K blocks of 128 (1024 values, 32 a
// lane of a warp), written in chunks of 8 rows, one chunk per grab of a warp.
constexpr int kUnpackSegmentK = 1024;
constexpr int kUnpackChunkRows = 8;
// At most the kBN of a config that unpacks (LargeUnpacking's is 256): bounds the flags allocated.
constexpr int kUnpackMinTileCols = 64;

// What the kernel reads besides the source. The flags: [0] the next chunk to grab;
// [1 + column tile * segments + segment] the chunks of that piece written.
struct UnpackAhead {
  InGemmUnpack src;
  int8_t* out = nullptr;  // B's int8 [N, K], rows out_stride bytes apart
  int64_t out_stride = 0;
  int n = 0, k = 0;
  int segments = 0;   // ceil(K / kUnpackSegmentK)
  int band_cols = 0;  // column tiles unpacked segment by segment before the next band's
};

// The kernel's last parameter: UnpackAhead in configs that unpack B (TileConfig::kBUnpacks), an
// empty struct in the others.
struct NoUnpackAhead {};
template <class Cfg>
using UnpackAheadArg = std::conditional_t<Cfg::kBUnpacks, UnpackAhead, NoUnpackAhead>;

// The flags (uint32 words, zeroed) a launch on an N x K packed weight needs with any config.
inline int64_t in_gemm_unpack_flag_words(int64_t n, int64_t k) {
  return 1 + (n + kUnpackMinTileCols - 1) / kUnpackMinTileCols * ((k + kUnpackSegmentK - 1) / kUnpackSegmentK);
}

// Whether the kernel can read the packed rows (16-byte loads of 32 values: K a multiple of 32,
// base and row stride 16-byte aligned) and write the int8 rows (16-byte aligned: out_stride too).
inline bool in_gemm_unpackable(const void* packed, int64_t packed_stride, int64_t k) {
  return k % 32 == 0 && reinterpret_cast<uintptr_t>(packed) % 16 == 0 && packed_stride % 16 == 0;
}

}  // namespace tcgemm::sm90

// The unpacking kernel: a thread per 16 values of a row (8 packed bytes), all within one 1x128
// group. Rows whose bytes allow it move as one 8-byte load and one 16-byte store; others byte by
// byte. Bound by memory: 1.5 bytes moved per weight.
#include "kernels/int4/unpack_int4.h"

#include <algorithm>
#include <cstring>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "common/math.h"
#include "common/scale_layout.h"

namespace tcgemm {
namespace {

constexpr int kValuesPerThread = 16;
constexpr int kThreads = 256;

// The value of byte `byte`'s nibble `high` less the zero point, times the group scale, as int8
// (two's complement).
TCGEMM_HD int8_t unpacked(uint8_t byte, bool high, int scale, int zero = 0) {
  return static_cast<int8_t>((int4_nibble(byte, high) - zero) * scale);
}

TCGEMM_HD int group_scale_of(const UnpackInt4Params& p, int64_t row, int64_t k) {
  return p.group_scale == nullptr ? 1 : p.group_scale[row * p.group_scale_stride + k / kScaleBlock];
}

TCGEMM_HD int zero_point_of(const UnpackInt4Params& p, int64_t row, int64_t k) {
  return p.zero_point == nullptr ? 0 : p.zero_point[row * p.zero_point_stride + k / kScaleBlock];
}

__global__ void __launch_bounds__(kThreads) unpack_int4_kernel(const UnpackInt4Params p, bool vector_rows) {
  const int64_t chunks = ceil_div<int64_t>(p.k, kValuesPerThread);
  const int64_t total = p.n * chunks;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < total; i += int64_t{gridDim.x} * kThreads) {
    const int64_t row = i / chunks, k0 = (i - row * chunks) * kValuesPerThread;
    const uint8_t* src = p.packed + row * p.packed_stride + k0 / kInt4PerByte;
    int8_t* dst = p.out + row * p.out_stride + k0;
    const int scale = group_scale_of(p, row, k0), zero = zero_point_of(p, row, k0);
    if (vector_rows && k0 + kValuesPerThread <= p.k) {
      const uint2 w = *reinterpret_cast<const uint2*>(src);
      const uint32_t words[2] = {w.x, w.y};
      uint32_t out[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t v = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int idx = 4 * j + e;  // value idx of the 16: byte idx / 2 of the 8
          const uint8_t byte = static_cast<uint8_t>(words[idx / 8] >> (8 * (idx % 8 / 2)));
          v |= static_cast<uint32_t>(static_cast<uint8_t>(unpacked(byte, idx % 2 == 1, scale, zero))) << (8 * e);
        }
        out[j] = v;
      }
      *reinterpret_cast<uint4*>(dst) = make_uint4(out[0], out[1], out[2], out[3]);
    } else {
      const int64_t end = std::min<int64_t>(p.k - k0, kValuesPerThread);
      for (int64_t e = 0; e < end; ++e) dst[e] = unpacked(src[e / 2], e % 2 == 1, scale, zero);
    }
  }
}

}  // namespace

void launch_unpack_int4(const UnpackInt4Params& p) {
  const bool vector_rows = reinterpret_cast<uintptr_t>(p.packed) % 8 == 0 && p.packed_stride % 8 == 0 &&
                           reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.out_stride % 16 == 0;
  const int64_t threads = p.n * ceil_div<int64_t>(p.k, kValuesPerThread);
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(threads, kThreads), int64_t{1} << 20);
  unpack_int4_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, p.stream>>>(p, vector_rows);
  TCGEMM_CHECK_LAUNCH();
}

// Eight values (four packed bytes read as a little-endian word, one group: 8 divides
// kScaleBlock) at a time, then the tail; with zero points, value by value.
void unpack_int4_rows(const UnpackInt4Params& p, int64_t row_begin, int64_t row_end) {
  static_assert(kScaleBlock % 8 == 0, "eight values share a group scale");
  for (int64_t row = row_begin; row < row_end; ++row) {
    const uint8_t* src = p.packed + row * p.packed_stride;
    int8_t* dst = p.out + row * p.out_stride;
    int64_t k = 0;
    for (; p.zero_point == nullptr && k + 8 <= p.k; k += 8) {
      uint32_t packed, out[2];
      std::memcpy(&packed, src + k / 2, sizeof(packed));
      unpack_int4x8_scaled(packed, static_cast<uint32_t>(group_scale_of(p, row, k)), out[0], out[1]);
      std::memcpy(dst + k, out, sizeof(out));
    }
    for (; k < p.k; ++k) dst[k] = unpacked(src[k / 2], k % 2 == 1, group_scale_of(p, row, k), zero_point_of(p, row, k));
  }
}

}  // namespace tcgemm

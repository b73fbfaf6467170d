// Unpacking 4-bit weights (common/int4.h) into int8 [N, K], times their int8 group scales when
// given, less their zero points when given (asymmetric weights: q - z, in [-15, 15] for z in
// [-8, 7]): the int8 weight that the GEMM kernels without a 4-bit main loop compute with, and
// tcgemm.unpack_int4.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tcgemm {

struct UnpackInt4Params {
  const uint8_t* packed = nullptr;  // [N, K / 2] bytes, rows packed_stride bytes apart
  int64_t packed_stride = 0;
  const int8_t* group_scale = nullptr;  // [N, ceil(K / 128)], rows group_scale_stride apart; or null
  int64_t group_scale_stride = 0;
  const int8_t* zero_point = nullptr;  // [N, ceil(K / 128)], rows zero_point_stride apart; or null
  int64_t zero_point_stride = 0;
  int8_t* out = nullptr;  // [N, K], rows out_stride bytes apart
  int64_t out_stride = 0;
  int64_t n = 0, k = 0;  // K even
  cudaStream_t stream = nullptr;
};

// Enqueues the unpacking on p.stream (n, k > 0).
void launch_unpack_int4(const UnpackInt4Params& p);

// The same on the CPU, for rows [row_begin, row_end).
void unpack_int4_rows(const UnpackInt4Params& p, int64_t row_begin, int64_t row_end);

}  // namespace tcgemm

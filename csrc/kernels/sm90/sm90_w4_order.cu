// A's rows in the W4 kernel's K order (common/int4.h: the W4 K order), for an int8 A that the
// binding layer did not write so itself (tcgemm.gemm_int4, and A quantized apart).
#include <cstdint>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "common/math.h"
#include "kernels/sm90/sm90_w4.h"

namespace tcgemm::sm90 {
namespace {

// Thread i takes the 8 values at k = 8 (i % (k / 8)) of row i / (k / 8): k = 32 t + 8 s + 0 .. 7 of
// a K block, whose even values go to slots 32 s + 4 t .. + 3 and odd ones to 32 s + 16 + 4 t .. + 3.
__global__ void w4_order_kernel(const int8_t* src, int64_t src_stride, int64_t src_stride_k, int8_t* dst,
                                int64_t dst_stride, int64_t m, int64_t k) {
  const int64_t per_row = k / 8;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * per_row) return;
  const int64_t row = i / per_row, k0 = 8 * (i % per_row);
  const int8_t* from = src + row * src_stride + k0 * src_stride_k;
  uint32_t lo = 0, hi = 0;
  for (int j = 0; j < 4; ++j) {
    lo |= static_cast<uint32_t>(static_cast<uint8_t>(from[j * src_stride_k])) << (8 * j);
    hi |= static_cast<uint32_t>(static_cast<uint8_t>(from[(4 + j) * src_stride_k])) << (8 * j);
  }
  const int64_t block = k0 / 128 * 128;
  const int in_block = static_cast<int>(k0 % 128), t = in_block / 32, s = (in_block % 32) / 8;
  int8_t* to = dst + row * dst_stride + block + 32 * s + 4 * t;
  *reinterpret_cast<uint32_t*>(to) = byte_perm(lo, hi, 0x6420);       // k0, k0 + 2, k0 + 4, k0 + 6
  *reinterpret_cast<uint32_t*>(to + 16) = byte_perm(lo, hi, 0x7531);  // k0 + 1, ... k0 + 7
}

}  // namespace

void launch_w4_order(const int8_t* src, int64_t src_stride, int64_t src_stride_k, int8_t* dst, int64_t dst_stride,
                     int64_t m, int64_t k, cudaStream_t stream) {
  const int64_t threads = m * (k / 8);
  if (threads == 0) return;
  constexpr int kBlock = 256;
  w4_order_kernel<<<static_cast<unsigned>(ceil_div<int64_t>(threads, kBlock)), kBlock, 0, stream>>>(
      src, src_stride, src_stride_k, dst, dst_stride, m, k);
  TCGEMM_CHECK_LAUNCH();
}

}  // namespace tcgemm::sm90

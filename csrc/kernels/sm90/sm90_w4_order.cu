// A's rows in the W4 kernel's K order (common/int4.h: the W4 K order), and their sums over K, for
// an int8 A that the binding layer did not write so itself (tcgemm.gemm_int4, and A quantized apart).
#include <cstdint>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "common/launch_kernel.cuh"
#include "common/math.h"
#include "kernels/sm90/sm90_w4.h"
#include "ptx/griddep.cuh"

namespace tcgemm::sm90 {
namespace {

constexpr int kOrderThreads = 256;

// Block r takes row r: thread i the groups of 8 values at k = 8 (i + j * kOrderThreads), each
// stored in the W4 K order (store_w4_order8); and the row's sum over K into rowsum[r].
__global__ void __launch_bounds__(kOrderThreads) w4_order_kernel(const int8_t* src, int64_t src_stride,
                                                                 int64_t src_stride_k, int8_t* dst, int64_t dst_stride,
                                                                 int32_t* rowsum, int64_t k) {
  ptx::start_after_previous_kernel();  // A is the kernel before this one's; the W4 kernel may start its copies
  const int64_t row = blockIdx.x;
  int32_t sum = 0;
  for (int64_t k0 = 8 * static_cast<int64_t>(threadIdx.x); k0 < k; k0 += 8 * kOrderThreads) {
    const int8_t* from = src + row * src_stride + k0 * src_stride_k;
    uint32_t lo = 0, hi = 0;
    for (int j = 0; j < 4; ++j) {
      const int8_t a = from[j * src_stride_k], b = from[(4 + j) * src_stride_k];
      sum += a + b;
      lo |= static_cast<uint32_t>(static_cast<uint8_t>(a)) << (8 * j);
      hi |= static_cast<uint32_t>(static_cast<uint8_t>(b)) << (8 * j);
    }
    store_w4_order8(dst + row * dst_stride, k0, lo, hi);
  }
  // |sum| <= 128 K: no overflow for any K the ops take
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, offset);
  __shared__ int32_t warp_sums[kOrderThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t total = 0;
    for (int w = 0; w < kOrderThreads / 32; ++w) total += warp_sums[w];
    rowsum[row] = total;
  }
}

}  // namespace

void launch_w4_order(const int8_t* src, int64_t src_stride, int64_t src_stride_k, int8_t* dst, int64_t dst_stride,
                     int32_t* rowsum, int64_t m, int64_t k, cudaStream_t stream, bool overlap) {
  if (m == 0) return;
  launch_kernel(w4_order_kernel, dim3(static_cast<unsigned>(m)), dim3(kOrderThreads), 0, stream, overlap, src,
                src_stride, src_stride_k, dst, dst_stride, rowsum, k);
}

}  // namespace tcgemm::sm90

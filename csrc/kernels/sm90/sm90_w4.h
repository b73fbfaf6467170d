// Host-side interface of the W4 kernel (sm90_w4.cuh): a packed 4-bit weight as wgmma's register
// operand, for 17-512 rows of A. Launchers per config (configs.h: W4Config) in sm90_w4_<rows>.cu.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/problem.h"

namespace tcgemm::sm90 {

// Needs p.b_int4 (two-level or unscaled, sums over all of K; or, with an epilogue that promotes
// per-block scales, on the configs built for it, unscaled with fp32 scales per K block),
// p.a_w4_order (A written in the kernel's K order, a signed int8 A that TMA can describe; its row
// sums in p.a_w4_rowsum unless promoting), K a multiple of 128 and B's bytes
// TMA-describable (sm90_tensor_map.h: packed_tma_describable). split: the blocks of a cluster that
// share each tile's K blocks (1, 2 or 4), their sums added in distributed shared memory.
template <class Cfg, class Epi>
void launch_w4(const GemmProblem& p, const Epi& epi, int split);

// Blocks of Cfg the current device runs at once in clusters of `split` (1, 2 or 4), at the most
// shared memory a block of Cfg asks for: a cluster's blocks go to the SMs of one GPC, so clusters
// of 4 leave some SMs' slots empty where clusters of 2 fill them (H200, two blocks per SM: 62
// clusters of 4, 248 of 264 slots).
template <class Cfg>
int w4_resident_blocks(int split);

// Writes A's rows (m x k int8, element (i, k) at src[i * src_stride + k * src_stride_k]) in the
// W4 kernel's K order (common/int4.h: the W4 K order) into dst (rows dst_stride bytes apart, a
// multiple of 16), and each row's sum over K into rowsum[i] (the kernel's uint8 weight is q * s +
// 128: it subtracts 128 times these); k a multiple of 128. With `overlap` (programmatic dependent
// launch) it may start while the kernel before it runs, and reads A only once that one is done.
void launch_w4_order(const int8_t* src, int64_t src_stride, int64_t src_stride_k, int8_t* dst, int64_t dst_stride,
                     int32_t* rowsum, int64_t m, int64_t k, cudaStream_t stream, bool overlap);

}  // namespace tcgemm::sm90

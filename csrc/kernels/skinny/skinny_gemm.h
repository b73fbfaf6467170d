// Host-side interface of the skinny-M kernel (mma.sync, sm_80+): D for a few rows of A against a
// wide B, streaming B from global memory straight into registers (int8) or through shared memory
// (packed 4-bit). The launchers are instantiated
// per tile config (configs.h) in skinny_<config>.cu for every epilogue.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "common/quantize_params.h"
#include "common/scale_layout.h"
#include "kernels/skinny/configs.h"

namespace tcgemm::skinny {

// Needs both operands K-major with a 16-byte aligned base (and row stride when they have more
// than one row); any M, N, K >= 1; no split-K through D. A packed 4-bit B (p.b_int4,
// packed_b_fits) needs an int8 A and a config other than Rows16Cols16 (Int4Rows16 up to 16
// rows); it is read by a persistent grid of kBlocksPerSm blocks on each of sm_count SMs, in
// clusters of p.cluster_k_split blocks that share each tile's K where dispatch asks (sm_90+).
template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi, int sm_count);

// Whether the kernel reads a packed 4-bit B (GemmProblem::b_int4) of `rows` rows in place: K-major,
// a 16-byte aligned base and, with more than one row, a row stride of whole 16 bytes.
inline bool packed_b_fits(const Operand& b, int64_t rows) {
  return b.stride_k == 1 && reinterpret_cast<uintptr_t>(b.ptr) % 16 == 0 && (rows == 1 || b.stride_row % 16 == 0);
}

// Whether x is one row quantized per token (batch-1 decode): the kernels of XQuant<T, true>.
inline bool one_token(const QuantizeParams& xq) {
  return xq.m == 1 && xq.scale_in == nullptr && xq.granularity == QuantGranularity::kToken;
}

// Whether the kernel can quantize x itself (xq describes x; its targets are not used): symmetric,
// dynamic per token or per 1x128 group or static per tensor, at most kQuantizeRows rows, x read
// as 16-byte vectors (an aligned base and row stride, a unit K stride, K a multiple of the
// vector) of which each thread holds at most kQuantizeVecs (per token and per tensor:
// kQuantizeVecs / M of each row; per group, each group of 128 values takes a whole group's lanes).
// k_split: the cluster blocks that share each tile's K (GemmProblem::cluster_k_split); one row
// quantized per token is then quantized a part per block (XShare), so K may be longer.
inline bool quantizes_in_kernel(const QuantizeParams& xq, int k_split = 1) {
  const int vec = xq.x_vec();
  if (xq.asymmetric || xq.m < 1 || xq.m > kQuantizeRows || xq.k < 1) return false;
  if (!xq.x_as_vectors(/*rows_strided=*/xq.m > 1)) return false;
  const int64_t row_vectors = XShare::most(xq.k / vec, vec, one_token(xq) ? k_split : 1);
  const bool rows_fit = (row_vectors + kThreads - 1) / kThreads <= kQuantizeVecs / xq.m;
  if (xq.scale_in != nullptr) return xq.granularity == QuantGranularity::kTensor && rows_fit;
  if (xq.granularity == QuantGranularity::kToken) return rows_fit;
  return xq.granularity == QuantGranularity::kGroup &&
         xq.m * scale_blocks(xq.k) * (kScaleBlock / vec) <= int64_t{kQuantizeVecs} * kThreads;
}

// The launcher that quantizes x (xq, quantizes_in_kernel) in the kernel instead of reading an
// int8 A: Epi one of KernelQuantizingEpilogues (epilogue/epilogues.h: the symmetric scaled ones)
// whose output type is x's; B as for launch(), in config QuantizingInt8 or, packed 4-bit,
// Int4Rows16 (configs.h; M <= kQuantizeRows). The grid is persistent (at most kBlocksPerSm
// blocks per SM, each taking tiles in turn), so that each block quantizes x once.
// smem_optin: the device's largest dynamic shared memory per block, which decides whether the
// first round of B is staged in shared memory while x is quantized (skinny_gemm.cuh).
template <class Epi>
void launch_quantizing(const GemmProblem& p, const Epi& epi, const QuantizeParams& xq, int sm_count,
                       int smem_optin);

}  // namespace tcgemm::skinny

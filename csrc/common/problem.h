// The plain description of one GEMM that the binding layer hands to dispatch and kernels: shape,
// operands, output. What is applied to the accumulators (the epilogue) travels separately
// (epilogue/epilogues.h). Nothing here depends on torch, so kernels build against CUDA alone.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/hd.h"

namespace tcgemm {

// One int8/uint8 operand seen as a [rows, K] matrix: A is [M, K]; B enters as its transpose [N, K].
// "K-major" (stride_k == 1) is the layout every tensor-core instruction wants in registers:
// A row-major, B column-major (the nn.Linear weight [N, K] passed as w.t()).
struct Operand {
  const void* ptr = nullptr;
  int64_t stride_row = 0;  // elements between consecutive rows (M for A, N for B)
  int64_t stride_k = 0;    // elements between consecutive K indices
  bool is_signed = true;   // int8 when true, uint8 otherwise

  TCGEMM_HD bool k_major() const { return stride_k == 1; }
  TCGEMM_HD bool rows_contiguous() const { return stride_row == 1 && !k_major(); }  // M- (or N-) major
};

// The element type of D: int32 for the exact GEMM, a float type for the scaled GEMM.
enum class OutType { kInt32, kBf16, kFp16, kFp32 };

// D: [M, N] of `type`, unit stride along N, `ld` elements between rows.
struct Output {
  void* ptr = nullptr;
  int64_t ld = 0;
  OutType type = OutType::kInt32;
};

// A packed 4-bit weight (common/int4.h) that the sm90 kernel unpacks itself into the int8 B it
// reads (dispatch/launch.h: unpacks_in_gemm): warps of the producer warpgroups, which issue no
// copies, write b (int8 [N, K], K-major) from these rows times their int8 group scales while the
// tiles are computed, and flag each piece done; a tile's loads of B wait for its pieces
// (kernels/sm90/sm90_unpack_ahead.cuh). flags: zeroed before the launch, in_gemm_unpack_flag_words.
struct InGemmUnpack {
  const uint8_t* packed = nullptr;  // [N, K / 2], rows packed_stride bytes apart
  int64_t packed_stride = 0;
  const int8_t* group_scale = nullptr;  // [N, ceil(K / 128)], rows group_scale_stride apart; or null
  int64_t group_scale_stride = 0;
  uint32_t* flags = nullptr;
  int64_t flag_words = 0;
};

struct GemmProblem {
  int m = 0, n = 0, k = 0;
  Operand a;  // [M, K]
  Operand b;  // B^T, [N, K]
  Output d;   // [M, N]
  // B as packed 4-bit values (common/int4.h; b.ptr its bytes, b.stride_row bytes between rows),
  // read by the skinny and sm90 kernels only (dispatch/launch.h: reads_packed_b), each value times its int8
  // group scale b_group_scale[n * b_group_scale_stride + k / 128] where one is given; b.is_signed
  // is then true (the values are two's complement).
  bool b_int4 = false;
  const int8_t* b_group_scale = nullptr;
  int64_t b_group_scale_stride = 0;
  // Or, asymmetric 4-bit B, each value less its zero point b_zero_point[n * b_zero_point_stride +
  // k / 128] (fp32 scales per K block; read by the skinny kernel only, else B is unpacked first).
  const int8_t* b_zero_point = nullptr;
  int64_t b_zero_point_stride = 0;
  // B's fp32 per-block scales per 128 / b_scale_groups inputs (1; 2: groups of 64, 4: of 32, for
  // 4-bit B): group j of K block kb takes the epilogue's b_block_scale(n, kb * b_scale_groups + j)
  // (common/scale_layout.h, weight_scale_groups). Read by the skinny kernel and the CPU only.
  int b_scale_groups = 1;
  // Split-K (set by dispatch, for epilogues that can add partial sums): K is cut into split_k
  // ranges of whole K blocks, each adding epilogue.partial(its sum) onto D with wrapping atomics,
  // after D was filled with epilogue(0) (epilogue/int32_epilogue_fill.h).
  int split_k = 1;
  // The skinny kernel's packed 4-bit B (sm_90+; set by dispatch, plan_skinny_int4_split, for
  // two-level and unscaled weights): each tile's K blocks are shared by the blocks of a cluster of
  // this many, whose int32 sums meet in distributed shared memory before the epilogue, so that a
  // layer of few tiles still keeps every SM busy.
  int cluster_k_split = 1;
  // Programmatic dependent launch (sm_90+; set by tcgemm.quant_linear for the skinny kernel, the
  // only one that honours it): the kernel may start while the kernel before it on the stream (the
  // activations' quantize) runs. It streams B before ptx::griddep_wait and reads A, the scales and
  // bias and writes D after it, so B must not be written by that kernel.
  bool pdl = false;
  // A's K order within each block of 128 is the W4 kernel's (common/int4.h: the W4 K order), not
  // plain: set by the binding layer, which writes A so (a_w4_order in dispatch/launch.h), and read
  // only by that kernel, which takes a packed 4-bit B as wgmma's register operand.
  bool a_w4_order = false;
  const int32_t* a_w4_rowsum = nullptr;  // with a_w4_order: A's row sums over K, [M]
  cudaStream_t stream = nullptr;
  // B's int8 weight written by the sm90 kernel from a packed one as it runs (set by the binding
  // layer where unpacks_in_gemm allows; b then describes the int8 buffer it fills), or null. Last,
  // and a pointer, so that the kernels that take the problem whole (skinny) keep their layout.
  const InGemmUnpack* b_unpack = nullptr;
};

}  // namespace tcgemm

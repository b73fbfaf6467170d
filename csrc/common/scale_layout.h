// Scales of the scaled GEMM: the one block size and the one decoder of scale shapes.
// Nothing here depends on torch: the binding layer describes a scale tensor with plain numbers.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "common/hd.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace tcgemm {

// K (and, for 128x128 weight scales, N) extent of one per-block scale; also the K depth of one
// promotion in the per-block kernels and of one activation group of `quantize`.
constexpr int kScaleBlock = 128;
constexpr int kScaleBlockShift = 7;
static_assert(1 << kScaleBlockShift == kScaleBlock, "the shift must match the block");

TCGEMM_HD constexpr int64_t scale_blocks(int64_t extent) { return (extent + kScaleBlock - 1) / kScaleBlock; }

// How `quantize` scales x [M, K]: kTensor, one scale for all of x; kToken, one per row; kGroup,
// one per row and kScaleBlock-wide K group (the activation blocks of the scaled GEMM);
// G = scale_blocks(K), the last may be short. quantize_scales() below gives their shape.
enum class QuantGranularity : int { kTensor, kToken, kGroup };

// The 16-bit float formats a table of 4-bit B's scales per 64 or 32 inputs may hold (what
// checkpoints store), read into fp32 exactly.
enum class ScaleDtype : int { kF32, kBf16, kF16 };

TCGEMM_HD float bf16_bits_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

TCGEMM_HD float f16_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));  // one conversion, subnormals exact
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  const uint32_t bits = sign | (exp == 0x1fu ? 0x7f800000u : (exp + 112u) << 23) | (mant << 13);
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

// The 16-bit formats as types, for kernels built per format, with their decoders.
struct Bf16Bits {};
struct F16Bits {};
template <class T>
struct HalfScaleBits {
  static constexpr bool kIs16Bit = false;
};
template <>
struct HalfScaleBits<Bf16Bits> {
  static constexpr bool kIs16Bit = true;
  TCGEMM_HD static float value(uint16_t bits) { return bf16_bits_to_float(bits); }
};
template <>
struct HalfScaleBits<F16Bits> {
  static constexpr bool kIs16Bit = true;
  TCGEMM_HD static float value(uint16_t bits) { return f16_bits_to_float(bits); }
};

// The scales of one operand ([rows, K]: A, or B seen as [N, K]), fp32, addressed by strides so
// that one description covers every granularity (a zero stride broadcasts):
//   s(r, kb) = ptr[(r >> row_shift) * stride_row + kb * stride_kb],  kb = the 128-wide K block.
// A 4-bit B's table per 64 or 32 inputs may instead hold bf16 or fp16 (dtype; ptr then points at
// 16-bit values, the strides count them), read by group_at only.
struct ScaleOperand {
  const float* ptr = nullptr;
  int64_t stride_row = 0;
  int64_t stride_kb = 0;
  int row_shift = 0;  // kScaleBlockShift when one scale covers 128 rows (128x128 weight blocks)
  ScaleDtype dtype = ScaleDtype::kF32;

  TCGEMM_HD bool per_block() const { return stride_kb != 0; }
  // One scale per row and K block (B's [N, ceil(K/128)]: a channel's 1x128 blocks), not one per
  // 128 rows.
  TCGEMM_HD bool per_row_block() const { return per_block() && row_shift == 0; }
  TCGEMM_HD const float* row_ptr(int64_t r) const { return ptr + (r >> row_shift) * stride_row; }
  TCGEMM_HD float at(int64_t r, int64_t kb) const { return row_ptr(r)[kb * stride_kb]; }
  // Scale `group` of row r of a table of any ScaleDtype; of a 16-bit table also its bits as
  // stored (kernels load the bits a K block ahead and decode them where they are used, so that no
  // conversion waits on the load: MmaSyncPromotion).
  TCGEMM_HD uint16_t group_bits16_at(int64_t r, int64_t group) const {
    return reinterpret_cast<const uint16_t*>(ptr)[(r >> row_shift) * stride_row + group * stride_kb];
  }
  TCGEMM_HD float group_at(int64_t r, int64_t group) const {
    if (dtype == ScaleDtype::kF32) return at(r, group);
    const uint16_t bits = group_bits16_at(r, group);
    return dtype == ScaleDtype::kBf16 ? HalfScaleBits<Bf16Bits>::value(bits) : HalfScaleBits<F16Bits>::value(bits);
  }
};

// A scale tensor as the binding layer sees it (dim <= 2; sizes and strides of its dimensions).
struct ScaleTensor {
  const float* ptr = nullptr;
  int dim = 0;
  int64_t sizes[2] = {1, 1};
  int64_t strides[2] = {0, 0};
  int64_t numel() const { return dim == 0 ? 1 : dim == 1 ? sizes[0] : sizes[0] * sizes[1]; }
};

// The contiguous scales `quantize` returns for m rows of k values (scale_out of QuantizeParams),
// at ptr: [] per tensor, [M, 1] per token, [M, G] per group (decode_scale_a reads them).
inline ScaleTensor quantize_scales(QuantGranularity g, const float* ptr, int64_t m, int64_t k) {
  ScaleTensor s;
  s.ptr = ptr;
  if (g == QuantGranularity::kTensor) return s;
  s.dim = 2;
  s.sizes[0] = m;
  s.sizes[1] = g == QuantGranularity::kToken ? 1 : scale_blocks(k);
  s.strides[0] = s.sizes[1];  // contiguous
  s.strides[1] = 1;
  return s;
}

// scale_a of A [M, K] with kb = max(1, ceil(K / 128)) K blocks: [] / [1] / [1, 1] per tensor,
// [M, 1] per token, [M, kb] per 1x128 block; nullopt for any other shape.
inline std::optional<ScaleOperand> decode_scale_a(const ScaleTensor& s, int64_t m, int64_t kb) {
  ScaleOperand op;
  op.ptr = s.ptr;
  if (s.numel() == 1 && s.dim <= 2) return op;
  if (s.dim == 2 && s.sizes[0] == m && (s.sizes[1] == 1 || s.sizes[1] == kb)) {
    op.stride_row = m > 1 ? s.strides[0] : 0;
    op.stride_kb = s.sizes[1] > 1 ? s.strides[1] : 0;
    return op;
  }
  return std::nullopt;
}

// B's 2-D per-block scales with kb columns: ceil(N/128) rows (128x128 blocks) or N rows (a
// channel's 1x128 blocks); nullopt for any other shape.
inline std::optional<ScaleOperand> decode_scale_b_blocks(const ScaleTensor& s, int64_t n, int64_t kb) {
  const int64_t nb = scale_blocks(n);
  if (s.dim != 2 || s.sizes[1] != kb || (s.sizes[0] != nb && s.sizes[0] != n)) return std::nullopt;
  ScaleOperand op;
  op.ptr = s.ptr;
  op.row_shift = s.sizes[0] == nb ? kScaleBlockShift : 0;
  op.stride_row = s.sizes[0] > 1 ? s.strides[0] : 0;
  op.stride_kb = kb > 1 ? s.strides[1] : 0;
  return op;
}

// scale_b of B [K, N]: [] / [1] per tensor, [N] or [1, N] per channel, [ceil(N/128), kb] per
// 128x128 block, [N, kb] per channel and 1x128 block; ambiguous shapes resolve in that order.
inline std::optional<ScaleOperand> decode_scale_b(const ScaleTensor& s, int64_t n, int64_t kb) {
  ScaleOperand op;
  op.ptr = s.ptr;
  if (s.numel() == 1 && s.dim <= 2) return op;
  if (s.dim == 1 && s.sizes[0] == n) {
    op.stride_row = s.strides[0];
    return op;
  }
  if (s.dim == 2 && s.sizes[0] == 1 && s.sizes[1] == n) {
    op.stride_row = s.strides[1];
    return op;
  }
  return decode_scale_b_blocks(s, n, kb);
}

// The scales of an nn.Linear-style weight [N, K] (tcgemm.quant_linear, QuantLinear.weight_scale),
// never ambiguous: [N] per channel; 2-D per block, with kb = ceil(K / 128) columns and
// ceil(N / 128) rows (128x128 blocks) or N rows (a channel's 1x128 blocks); else [N, 1] per channel
// (what tcgemm.quantize returns for a weight's rows; with one K block it is that block's layout,
// which means the same).
inline std::optional<ScaleOperand> decode_weight_scale(const ScaleTensor& s, int64_t n, int64_t kb) {
  ScaleOperand op;
  op.ptr = s.ptr;
  if (s.dim == 1 && s.sizes[0] == n) {
    op.stride_row = s.strides[0];
    return op;
  }
  if (const std::optional<ScaleOperand> blocks = decode_scale_b_blocks(s, n, kb)) return blocks;
  if (s.dim == 2 && s.sizes[0] == n && s.sizes[1] == 1) {
    op.stride_row = s.strides[0];
    return op;
  }
  return std::nullopt;
}

// The fp32 scales of a 4-bit weight per channel and group of kScaleBlock / groups inputs, groups
// 2 (64 inputs) or 4 (32), are a [N, ceil(K * groups / 128)] table: its group count, or 1 for any
// other table (one per 1x128 block among them; a width two group sizes share means one group
// for both, K being at most the smaller).
inline int weight_scale_groups(const ScaleTensor& s, int64_t n, int64_t k) {
  for (const int groups : {2, 4}) {
    const int64_t width = (k * groups + kScaleBlock - 1) / kScaleBlock;
    if (s.dim == 2 && s.sizes[0] == n && s.sizes[1] == width && width != scale_blocks(k)) return groups;
  }
  return 1;
}

// The shapes each decoder above accepts, as the ops' error messages name them (m, n: the rows of
// the operand; kb: its K blocks, as the decoder was given them).
inline std::string weight_block_shapes(int64_t n, int64_t kb) {
  return "[ceil(N/128), ceil(K/128)] = [" + std::to_string(scale_blocks(n)) + ", " + std::to_string(kb) +
         "] (per-block 128x128) or [N, ceil(K/128)] = [" + std::to_string(n) + ", " + std::to_string(kb) + "]";
}
inline std::string scale_a_shapes(int64_t m, int64_t kb) {
  return "[] or [1] (per-tensor), [M, 1] = [" + std::to_string(m) + ", 1] (per-token) or [M, ceil(K/128)] = [" +
         std::to_string(m) + ", " + std::to_string(kb) + "] (per-block 1x128)";
}
inline std::string scale_b_shapes(int64_t n, int64_t kb) {
  return "[] or [1] (per-tensor), [N] = [" + std::to_string(n) + "] or [1, N] (per-channel), " +
         weight_block_shapes(n, kb);
}
inline std::string weight_scale_shapes(int64_t n, int64_t kb) {
  return "[N] = [" + std::to_string(n) + "] or [N, 1] (per-channel), " + weight_block_shapes(n, kb);
}

}  // namespace tcgemm

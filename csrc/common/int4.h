// Packed 4-bit weights: the format, and the unpacking every path shares.
//
// A 4-bit weight [N, K] (K even) is stored as bytes [N, K / 2]: byte j of a row holds k = 2j in
// its low nibble and k = 2j + 1 in its high nibble, each a two's-complement value in [-8, 7]. (Seen
// as little-endian 32-bit words, value i of each eight sits at bits 4i: compressed-tensors' int32
// packing order; that format stores q + 8, one XOR 0x88 per byte away.)
//
// Two-level scales: an int8 group scale per 1x128 group of each row (kScaleBlock), in
// [kInt4GroupScaleMin, kInt4GroupScaleMax], so that every 4-bit value times its group scale is an
// int8 (-8 * 16 = -128 .. 7 * 16 = 112): the weight the int32 GEMM computes with is that int8
// product, exactly, and a per-channel fp32 scale rides in the epilogue.
#pragma once

#include <cstdint>

#include "common/hd.h"
#include "common/scale_layout.h"

namespace tcgemm {

constexpr int kInt4PerByte = 2;
constexpr int kInt4GroupScaleMin = 1;
constexpr int kInt4GroupScaleMax = 16;
// Zero points of asymmetric 4-bit weights (a 4-bit value's range): q - z in [-15, 15], an int8.
constexpr int kInt4ZeroPointMin = -8;
constexpr int kInt4ZeroPointMax = 7;

// The signed 4-bit value in the low (high = false) or high nibble of a packed byte.
TCGEMM_HD int int4_nibble(uint8_t byte, bool high) {
  const int v = high ? byte >> 4 : byte & 0xF;
  return v >= 8 ? v - 16 : v;
}

// Bytes of {a, b} (a's 0-3, b's 4-7) picked by the four low selector nibbles: PRMT's default
// mode for selectors 0-7 (no sign replication), on the host as well.
TCGEMM_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, selector);
#else
  const uint64_t bytes = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((bytes >> (8 * ((selector >> (4 * i)) & 7))) & 0xFF) << (8 * i);
  return out;
#endif
}

static_assert(8 * kInt4GroupScaleMax <= 128 && 7 * kInt4GroupScaleMax + 128 <= 255, "q * s + 128 must fit a byte");
// unpack_int4x8_scaled_even_odd's bytes (below) as unsigned q * s + 128 in [0, 240] (five
// instructions for eight values), for a kernel that takes them as uint8 and subtracts 128 times
// the other operand's sum over K.
TCGEMM_HD void unpack_int4x8_scaled_even_odd_biased(uint32_t packed, uint32_t s, uint32_t& even, uint32_t& odd) {
  const uint32_t bias = 0x80808080u - s * 0x08080808u;                 // 128 - 8 s per byte
  const uint32_t e = (packed ^ 0x88888888u) & 0x0F0F0F0Fu;             // q + 8 of k, k + 2, k + 4, k + 6
  const uint32_t o = ((packed >> 4) ^ 0x08080808u) & 0x0F0F0F0Fu;      // of k + 1, k + 3, k + 5, k + 7
  even = e * s + bias;                                                  // q * s + 128
  odd = o * s + bias;
}

// unpack_int4x8_scaled's bytes (below) left in the packed word's order: even = k, k + 2, k + 4,
// k + 6 and odd = k + 1, k + 3, k + 5, k + 7 (seven instructions for eight values), for a kernel
// whose other operand takes that order (the W4 kernel's A: the W4 K order below).
TCGEMM_HD void unpack_int4x8_scaled_even_odd(uint32_t packed, uint32_t s, uint32_t& even, uint32_t& odd) {
  unpack_int4x8_scaled_even_odd_biased(packed, s, even, odd);
  even ^= 0x80808080u;  // q * s + 128 -> q * s
  odd ^= 0x80808080u;
}

// The eight 4-bit values of a packed word (k .. k + 7) times an integer scale s in
// [kInt4GroupScaleMin, kInt4GroupScaleMax], as int8 bytes in K order (lo = k .. k + 3, hi =
// k + 4 .. k + 7): the int8 weight of a two-level group (s = 1 without group scales), for the
// kernels that take B as int8 bytes and the CPU unpacking. A nibble XOR 8 is q + 8 in [0, 15];
// per byte, (q + 8) * s + 128 - 8 s = q * s + 128 lies in [0, 240], so one 32-bit multiply-add
// handles four bytes without a carry between them, and an XOR 0x80 per byte turns q * s + 128
// into q * s as int8. Nine instructions for eight values.
TCGEMM_HD void unpack_int4x8_scaled(uint32_t packed, uint32_t s, uint32_t& lo, uint32_t& hi) {
  uint32_t even, odd;
  unpack_int4x8_scaled_even_odd(packed, s, even, odd);
  lo = byte_perm(even, odd, 0x5140);
  hi = byte_perm(even, odd, 0x7362);
}

// The W4 K order (kernels/sm90/sm90_w4.cuh, GemmProblem::a_w4_order), that kernel's order of A
// within each block of kScaleBlock values: slot 32 s + 16 h + 4 t + j of A's row holds the value
// at k = 32 t + 8 s + 2 j + h. The kernel's thread t of a quad reads one 16-byte piece of a weight
// row per K block (k = 32 t .. 32 t + 31, four packed words); word s, unpacked even / odd
// (unpack_int4x8_scaled_even_odd), is the A fragment of k-step s at columns 4 t .. (h = 0) and
// 16 + 4 t .. (h = 1). A dot product over a block does not depend on the order of K. What writes A
// so: quant_linear's quantization of x where the W4 kernel reads it (QuantizeParams::w4_rowsum), or
// else the ordering pass (kernels/sm90/sm90_w4_order.cu).

#if defined(__CUDACC__)
// Eight int8 values of a row of A at k0 .. k0 + 7 (k0 a multiple of 8; lo holds k0 .. k0 + 3, hi
// k0 + 4 .. k0 + 7, little-endian) stored in the W4 K order: for k0 = 32 t + 8 s within its block,
// the even ones (k0, k0 + 2, k0 + 4, k0 + 6) at slots 32 s + 4 t .. + 3 of the block, the odd ones
// 16 slots on. The ordering pass and the quantization that writes this order both store so.
__device__ __forceinline__ void store_w4_order8(int8_t* row, int64_t k0, uint32_t lo, uint32_t hi) {
  const int64_t block = k0 / kScaleBlock * kScaleBlock;
  const int in_block = static_cast<int>(k0 - block), t = in_block / 32, s = (in_block % 32) / 8;
  int8_t* to = row + block + 32 * s + 4 * t;
  *reinterpret_cast<uint32_t*>(to) = byte_perm(lo, hi, 0x6420);       // k0, k0 + 2, k0 + 4, k0 + 6
  *reinterpret_cast<uint32_t*>(to + 16) = byte_perm(lo, hi, 0x7531);  // k0 + 1, ... k0 + 7
}

// The eight 4-bit values of a packed word (k .. k + 7, little-endian) as two words of int8 bytes,
// each value times 16 (shifted into the high half of its byte, a nibble's two's complement is the
// byte's): even = k, k + 2, k + 4, k + 6 and odd = k + 1, k + 3, k + 5, k + 7. One shift and two
// masks for eight values; the other operand of a dot product takes the same order
// (pair_even_odd), and the sum over a K block carries a factor 16 that the caller takes out
// exactly (an arithmetic shift) once per block.
__device__ __forceinline__ void unpack_int4x8_times16(uint32_t packed, uint32_t& even, uint32_t& odd) {
  even = (packed << 4) & 0xF0F0F0F0u;
  odd = packed & 0xF0F0F0F0u;
}

// Eight int8 values in K order (lo = k .. k + 3, hi = k + 4 .. k + 7) reordered as
// unpack_int4x8_times16 orders a packed word: lo = k, k + 2, k + 4, k + 6, hi = k + 1, ... k + 7.
__device__ __forceinline__ void pair_even_odd(uint32_t& lo, uint32_t& hi) {
  const uint32_t even = __byte_perm(lo, hi, 0x6420), odd = __byte_perm(lo, hi, 0x7531);
  lo = even;
  hi = odd;
}
#endif

}  // namespace tcgemm

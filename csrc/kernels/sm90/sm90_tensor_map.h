// TMA descriptors for the int8 operands: a [rows, K] K-major matrix read in boxes of
// [box_rows, 128] bytes with 128-byte swizzle, the layout wgmma's descriptors expect.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "common/problem.h"

namespace tcgemm::sm90 {

// What TMA needs of an operand: K-major, 16-byte aligned base, and (for more than one row) a
// row stride that is a multiple of 16 bytes and no smaller than K.
bool tma_describable(const Operand& op, int64_t rows, int64_t k);

// Encodes the descriptor; throws std::runtime_error naming the operand if the driver refuses.
CUtensorMap make_operand_tensor_map(const Operand& op, int64_t rows, int64_t k, int box_rows, const char* name);

// A packed 4-bit operand ([rows, ceil(k / 2)] bytes, common/int4.h) read in boxes of
// [box_rows, 64] bytes (128 values of K), unswizzled: what tma_describable asks of its bytes.
bool packed_tma_describable(const Operand& op, int64_t rows, int64_t k);
CUtensorMap make_packed_operand_tensor_map(const Operand& op, int64_t rows, int64_t k, int box_rows, const char* name);

// The output D [M, N] of `type` (unit stride along N) written in boxes of [box_rows, box_cols]
// with 128-byte swizzle (box_cols * element size must be 128). TMA needs a 16-byte aligned base
// and a row stride (ldd * element size) that is a multiple of 16.
bool tma_storable(const void* d, size_t element_bytes, int64_t m, int64_t ldd);
CUtensorMap make_output_tensor_map(void* d, OutType type, int64_t m, int64_t n, int64_t ldd, int box_rows,
                                   int box_cols);

}  // namespace tcgemm::sm90

// The plain C++ quantization path: the scalar math of common/quantize_params.h, so q and the
// scales are bit-identical to the CUDA kernels'.
#pragma once

#include <cstdint>

#include "common/quantize_params.h"

namespace tcgemm::cpu {

// Inputs of the CPU path: p.x is fp32 (the binding layer converts bf16/fp16 exactly) with unit
// stride along K; p.q and the scales are contiguous. p.workspace and p.stream are unused.

// max |x| over rows [m_begin, m_end) (0 for an empty range): the per-tensor amax, in pieces.
float quantize_amax_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end);

// Quantizes rows [m_begin, m_end). Static scales come from p.scale_in; otherwise token and
// group scales are computed and written to p.scale_out, and a per-tensor quantization uses
// `tensor_scale` (the caller derives it from the amax of all rows with quant_scale_from_amax).
void quantize_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end, float tensor_scale = 1.f);

}  // namespace tcgemm::cpu

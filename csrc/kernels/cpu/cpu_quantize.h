// The plain C++ quantization path: the scalar math of common/quantize_params.h, so q and the
// scales are bit-identical to the CUDA kernels'.
#pragma once

#include <cstdint>

#include "common/quantize_params.h"

namespace tcgemm::cpu {

// Inputs of the CPU path: p.x of any of the three dtypes and any strides (rows are read in
// place when they are fp32 with unit stride, else converted one row at a time, exactly);
// p.q and the scales are contiguous. p.workspace and p.stream are unused.

// max |x| over rows [m_begin, m_end) (0 for an empty range; NaN or inf as amax_fold makes
// them): the per-tensor amax, in pieces.
float quantize_amax_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end);

// Quantizes rows [m_begin, m_end). Static scales come from p.scale_in: a token or group holding
// a non-finite x (or with an invalid scale) gets NaN in p.scale_out, and for one per-tensor
// scale the function returns true instead (the caller folds the rows' answers: no shared write).
// Otherwise token and group scales are computed and written to p.scale_out, and a per-tensor
// quantization uses `tensor_scale` (the caller derives it from the amax of all rows with
// quant_scale_from_amax). Asymmetric (p.asymmetric): static with p.zero_in (bad groups as above),
// or dynamic per token, writing the scales and zero points.
bool quantize_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end, float tensor_scale = 1.f);

}  // namespace tcgemm::cpu

// Symmetric int8 quantization on the GPU: q = clamp(rint(x / scale), -127, 127), fp32 scales
// per tensor, per row (token) or per row and 128-wide K group. See common/quantize_params.h
// for the shared scalar math and kernels/quantize/quantize.cu for how the work is split.
#pragma once

#include "common/quantize_params.h"

namespace tcgemm {

// Enqueues the quantization of p.x on p.stream; never synchronizes. Needs p.m > 0 and p.k > 0
// (the caller returns early for empty problems), a non-null p.workspace (4 bytes of device
// memory) for dynamic per-tensor quantization, and p.scale_out for every dynamic one.
// Any row stride of x is read in place; 16-byte loads are used when the rows allow them.
void launch_quantize(const QuantizeParams& p);

}  // namespace tcgemm

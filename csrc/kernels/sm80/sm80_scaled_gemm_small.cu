// Scaled-GEMM instantiations of the small mma.sync tiles (one translation unit each, to compile in parallel).
#include "dispatch/heuristics.h"
#include "kernels/sm80/sm80_int8_gemm.cuh"

template void tcgemm::sm80::launch_sm80_scaled_gemm<tcgemm::Sm80Small, false>(const tcgemm::GemmParams&);
template void tcgemm::sm80::launch_sm80_scaled_gemm<tcgemm::Sm80Small, true>(const tcgemm::GemmParams&);

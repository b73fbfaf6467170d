// Scaled-GEMM instantiations of one tile config (one translation unit each, to compile in parallel).
#include "dispatch/heuristics.h"
#include "kernels/sm90/sm90_int8_gemm.cuh"

template void tcgemm::sm90::launch_sm90_scaled_gemm<tcgemm::Sm90PingPong, false>(const tcgemm::GemmParams&, int);

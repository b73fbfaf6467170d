// One tile config per translation unit so the configs compile in parallel.
#include "dispatch/heuristics.h"
#include "kernels/sm90/sm90_int8_gemm.cuh"

template void tcgemm::sm90::launch_sm90_int8_gemm<tcgemm::Sm90Tiny>(const tcgemm::GemmParams&, int);

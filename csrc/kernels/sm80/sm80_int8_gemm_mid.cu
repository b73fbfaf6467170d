// One tile config per translation unit so the configs compile in parallel.
#include "dispatch/heuristics.h"
#include "kernels/sm80/sm80_int8_gemm.cuh"

template void tcgemm::sm80::launch_sm80_int8_gemm<tcgemm::Sm80Mid>(const tcgemm::GemmParams&);

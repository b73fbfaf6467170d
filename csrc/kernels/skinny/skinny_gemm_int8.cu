// The skinny kernel's int32 GEMM instantiations (one translation unit per output kind, so they compile in parallel).
#include "kernels/skinny/skinny_gemm.cuh"

template void tcgemm::skinny::launch_skinny_int8_gemm<1, 2>(const tcgemm::GemmParams&);
template void tcgemm::skinny::launch_skinny_int8_gemm<1, 4>(const tcgemm::GemmParams&);
template void tcgemm::skinny::launch_skinny_int8_gemm<2, 2>(const tcgemm::GemmParams&);

// The skinny kernel's scaled GEMM instantiations.
#include "kernels/skinny/skinny_gemm.cuh"

template void tcgemm::skinny::launch_skinny_scaled_gemm<1, 2>(const tcgemm::GemmParams&);
template void tcgemm::skinny::launch_skinny_scaled_gemm<1, 4>(const tcgemm::GemmParams&);
template void tcgemm::skinny::launch_skinny_scaled_gemm<2, 2>(const tcgemm::GemmParams&);

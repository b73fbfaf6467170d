// The sm90 launchers of the Int4Mid tile config (packed 4-bit B; one translation unit per config).
#include "kernels/sm90/sm90_gemm.cuh"

TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_SM90_INSTANTIATE_ONE, tcgemm::sm90::Int4Mid)

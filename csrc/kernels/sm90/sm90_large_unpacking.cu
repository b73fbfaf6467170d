// The sm90 launchers of the LargeUnpacking tile config (a packed 4-bit B unpacked by the producer
// warps as the tiles run; one translation unit per config).
#include "kernels/sm90/sm90_gemm.cuh"

TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_SM90_INSTANTIATE_ONE, tcgemm::sm90::LargeUnpacking)

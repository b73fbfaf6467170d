// The sm80 launchers of the Small tile config (one translation unit per config, so they compile in parallel).
#include "kernels/sm80/sm80_gemm.cuh"

TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_SM80_INSTANTIATE_ONE, tcgemm::sm80::Small)

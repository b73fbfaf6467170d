// The sm90 launchers of the BlockColumns tile config (one translation unit per config, so they compile in parallel).
#include "kernels/sm90/sm90_gemm.cuh"

TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_SM90_INSTANTIATE_ONE, tcgemm::sm90::BlockColumns)

// The skinny launchers of the Rows16Cols16 tile config (one translation unit per config, so they compile in parallel).
#include "kernels/skinny/skinny_gemm.cuh"

TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_SKINNY_INSTANTIATE_ONE, tcgemm::skinny::Rows16Cols16)

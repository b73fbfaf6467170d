// The int8 GEMV's launchers for every epilogue (gemv_int8.cuh).
#include "kernels/gemv/gemv_int8.cuh"

TCGEMM_FOR_EACH_EPILOGUE(TCGEMM_GEMV_INSTANTIATE_ONE, unused)

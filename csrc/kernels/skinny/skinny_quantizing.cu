// The skinny launchers that quantize x in the kernel (tcgemm.quant_linear at a few rows): the
// configs QuantizingInt8 and Int4Rows16 (configs.h), the epilogues of KernelQuantizingEpilogues
// (the symmetric scaled ones; x and the output share a dtype).
#include "kernels/skinny/skinny_gemm.cuh"

TCGEMM_SKINNY_INSTANTIATE_QUANTIZING()

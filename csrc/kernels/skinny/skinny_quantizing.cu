// The skinny launchers that quantize x in the kernel (tcgemm.quant_linear at a few rows): the
// Rows16Cols16 config, the epilogues of KernelQuantizingEpilogues (the symmetric scaled ones; x
// and the output share a dtype).
#include "kernels/skinny/skinny_gemm.cuh"

TCGEMM_SKINNY_INSTANTIATE_QUANTIZING(tcgemm::skinny::Rows16Cols16)

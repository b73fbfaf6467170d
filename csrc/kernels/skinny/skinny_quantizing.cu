// The skinny launchers that quantize x in the kernel (tcgemm.quant_linear at a few rows): the
// Rows16Cols16 config, symmetric scaled epilogues (x and the output share a dtype).
#include "kernels/skinny/skinny_gemm.cuh"

#define TCGEMM_SKINNY_QUANTIZING(Epi) TCGEMM_SKINNY_INSTANTIATE_QUANTIZING(Epi, tcgemm::skinny::Rows16Cols16)
TCGEMM_SKINNY_QUANTIZING(tcgemm::epilogue_types::Bf16)
TCGEMM_SKINNY_QUANTIZING(tcgemm::epilogue_types::Fp16)
TCGEMM_SKINNY_QUANTIZING(tcgemm::epilogue_types::Fp32)
TCGEMM_SKINNY_QUANTIZING(tcgemm::epilogue_types::Bf16PerBlock)
TCGEMM_SKINNY_QUANTIZING(tcgemm::epilogue_types::Fp16PerBlock)
TCGEMM_SKINNY_QUANTIZING(tcgemm::epilogue_types::Fp32PerBlock)

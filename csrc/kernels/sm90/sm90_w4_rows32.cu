// The W4 kernel's launchers for tiles of 32 rows of x (W4Rows32; one translation unit per config).
#include "kernels/sm90/sm90_w4.cuh"

TCGEMM_SM90_W4_INSTANTIATE(tcgemm::sm90::W4Rows32)

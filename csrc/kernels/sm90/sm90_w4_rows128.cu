// The W4 kernel's launchers for tiles of 128 rows of x (W4Rows128; one translation unit per config).
#include "kernels/sm90/sm90_w4.cuh"

TCGEMM_SM90_W4_INSTANTIATE(tcgemm::sm90::W4Rows128)

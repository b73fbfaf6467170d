// The W4 kernel's launchers for tiles of 128 rows of x by 192 weight rows (W4Rows128Wg3; one
// translation unit per config).
#include "kernels/sm90/sm90_w4.cuh"

TCGEMM_SM90_W4_INSTANTIATE(tcgemm::sm90::W4Rows128Wg3)

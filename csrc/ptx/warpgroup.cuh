// Warpgroup-level control (sm_90a): register reallocation between warpgroups, and named
// barriers that synchronize a subset of the block's warps.
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

// setmaxnreg: this warpgroup gives back registers down to `Regs` per thread (dec) or claims up
// to `Regs` (inc). Takes effect only under a __launch_bounds__ register cap.
template <int Regs>
__device__ __forceinline__ void setmaxnreg_dec() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Regs));
#endif
}

template <int Regs>
__device__ __forceinline__ void setmaxnreg_inc() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Regs));
#endif
}

// bar.sync / bar.arrive on hardware barrier `id` (1..15; 0 is __syncthreads) for `threads`
// threads (a multiple of 32): sync waits for all of them, arrive signals without waiting.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace tcgemm::ptx

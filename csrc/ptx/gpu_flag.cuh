// Flags between blocks of one grid in global memory: a relaxed work counter, a release add that
// publishes what the writers stored before it, the acquire load that waits for it, and the sleep
// between polls.
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

// ld.acquire.gpu.global.u32: the flag's value; loads after it see what the releasing adds published.
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// red.release.gpu.global.add.u32: adds v once this thread's earlier writes (and those ordered
// before them, e.g. by a warp barrier after each writer's fence) are visible at GPU scope.
__device__ __forceinline__ void red_release_gpu_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// atom.relaxed.gpu.global.add.u32: the counter's value before adding v (no ordering: a work counter).
__device__ __forceinline__ uint32_t atom_relaxed_gpu_add(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.relaxed.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}

// fence.acq_rel.gpu: this thread's writes before it are ordered before its (and, through a
// barrier, its peers') later releases at GPU scope.
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

// nanosleep.u32: backs off a polling loop.
__device__ __forceinline__ void nanosleep(uint32_t ns) { asm volatile("nanosleep.u32 %0;\n" ::"r"(ns)); }

}  // namespace tcgemm::ptx

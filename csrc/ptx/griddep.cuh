// griddepcontrol (sm_90+): programmatic dependent launch. A kernel launched with the
// programmatic-stream-serialization attribute (common/launch_kernel.cuh) may start while the
// kernel before it on the stream is still running; these two instructions order the overlap.
// Both are no-ops for a kernel launched without the attribute, and before sm_90.
#pragma once

namespace tcgemm::ptx {

// griddepcontrol.wait: blocks until every grid this one depends on has completed and its memory
// writes are visible. Whatever such a grid may write, or read while running, is touched only
// after this.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// griddepcontrol.launch_dependents: once every block of this grid has executed it (or exited),
// the next kernel on the stream, if launched with the attribute, may be scheduled. It says
// nothing about memory: the dependent still waits (griddep_wait) for this grid to finish.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// A short kernel's first statement: memory is touched only after the kernel before this one has
// finished, and the kernel after it may be scheduled at once (it waits for this one's memory itself).
__device__ __forceinline__ void start_after_previous_kernel() {
  griddep_wait();
  griddep_launch_dependents();
}

}  // namespace tcgemm::ptx

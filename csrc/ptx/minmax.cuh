// max.NaN.f32 (sm_80+): the maximum that propagates NaN (fmaxf returns the other operand).
#pragma once

namespace tcgemm::ptx {

__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}

}  // namespace tcgemm::ptx

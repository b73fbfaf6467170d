// Stores of output elements that kernels share: any OutT of an epilogue (int32, fp32, bf16, fp16),
// two adjacent columns at once.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ptx/smem.cuh"

namespace tcgemm {

// The 32-bit pattern of a value, zero-extended for 16-bit types.
template <class T>
__device__ __forceinline__ uint32_t bits_of(T v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat16_as_ushort(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half_as_ushort(v);
  } else if constexpr (std::is_same_v<T, float>) {
    return __float_as_uint(v);
  } else {
    return static_cast<uint32_t>(v);
  }
}

// Stores two adjacent elements at an address aligned to their pair.
template <class Out>
__device__ __forceinline__ void store_pair_global(Out* dst, Out x, Out y) {
  if constexpr (sizeof(Out) == 2) {
    *reinterpret_cast<uint32_t*>(dst) = bits_of(x) | (bits_of(y) << 16);
  } else {
    *reinterpret_cast<uint2*>(dst) = make_uint2(bits_of(x), bits_of(y));
  }
}

template <class Out>
__device__ __forceinline__ void store_pair_shared(uint32_t addr, Out x, Out y) {
  if constexpr (sizeof(Out) == 2) {
    ptx::st_shared_b32(addr, bits_of(x) | (bits_of(y) << 16));
  } else {
    ptx::st_shared_v2(addr, static_cast<int32_t>(bits_of(x)), static_cast<int32_t>(bits_of(y)));
  }
}

}  // namespace tcgemm

// The per-vector pieces of int8 quantization on the GPU, shared by the quantize kernels
// (quantize.cu) and the few-rows GEMM that quantizes its activations itself
// (kernels/skinny/skinny_quantize.cuh): loads of x as packed vectors, the SmoothQuant product,
// the amax folds and reductions, and the quantized stores. The scalar rules they apply are in
// common/quantize_params.h, so every path gives the same bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/quantize_params.h"
#include "ptx/minmax.cuh"

namespace tcgemm::quant {

constexpr int kWarp = 32;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// VEC consecutive values of x as loaded. A 16-byte vector stays four packed words (bf16/fp16
// take half the registers of floats, which lets the token kernel keep twice as much of its
// rows in flight); other widths hold the values.
template <typename T, int VEC, bool Packed = VEC * sizeof(T) == 16>
struct RawVec {
  T e[VEC];
  __device__ __forceinline__ void load(const T* ptr) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) e[i] = ptr[i];
  }
  __device__ __forceinline__ float get(int i) const { return to_float(e[i]); }
};

template <typename T, int VEC>
struct RawVec<T, VEC, true> {
  uint32_t w[4];
  __device__ __forceinline__ void load(const T* ptr) { set(__ldg(reinterpret_cast<const uint4*>(ptr))); }
  __device__ __forceinline__ void set(const uint4& bits) {
    w[0] = bits.x;
    w[1] = bits.y;
    w[2] = bits.z;
    w[3] = bits.w;
  }
  // Value i (i a compile-time constant after unrolling, so w stays in registers).
  __device__ __forceinline__ float get(int i) const {
    if constexpr (sizeof(T) == 4) {
      return __uint_as_float(w[i]);
    } else {
      const uint32_t word = w[i / 2];
      const uint16_t half_bits = static_cast<uint16_t>(i % 2 == 0 ? word & 0xffffu : word >> 16);
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __uint_as_float(static_cast<uint32_t>(half_bits) << 16);  // bf16 is fp32's top half
      } else {
        return __half2float(__ushort_as_half(half_bits));
      }
    }
  }
};

template <typename T, int VEC>
__device__ __forceinline__ RawVec<T, VEC> load_raw(const T* ptr) {
  RawVec<T, VEC> r;
  r.load(ptr);
  return r;
}

template <typename T, int VEC>
__device__ __forceinline__ void to_floats(const RawVec<T, VEC>& r, float (&out)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = r.get(i);
}

// VEC consecutive values of x as floats.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* ptr, float (&out)[VEC]) {
  to_floats(load_raw<T, VEC>(ptr), out);
}

// SmoothQuant (QuantizeParams::channel_mul; MUL, a template flag so that the kernels without it
// are unchanged): VEC values of columns col.. times their multipliers, each product rounded once
// (__fmul_rn is never contracted into an FMA), as on the CPU.
template <bool MUL, int VEC>
__device__ __forceinline__ void apply_channel_mul(float (&v)[VEC], const QuantizeParams& p, int64_t col) {
  if constexpr (MUL) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = __fmul_rn(v[i], __ldg(p.channel_mul + col + i));
  }
}

// VEC copies of one value with one aligned store: a group whose scale is invalid holds its zero
// point (0 when symmetric).
template <int VEC>
__device__ __forceinline__ void store_fill(int8_t* dst, int8_t value) {
  struct alignas(VEC) Pack {
    int8_t b[VEC];
  } pack;
#pragma unroll
  for (int i = 0; i < VEC; ++i) pack.b[i] = value;
  *reinterpret_cast<Pack*>(dst) = pack;
}

// How a row or group is quantized: its divisor, and the zero point when ASYM. Built once per scale.
template <bool ASYM>
struct Quantizer {
  QuantDivisor divisor;
  int32_t zero;
  __device__ __forceinline__ Quantizer(float scale, int32_t z) : divisor(scale, ASYM ? 255.f : 127.f), zero(z) {}
  __device__ __forceinline__ bool valid() const { return divisor.valid; }
  // What a group with an invalid scale holds.
  __device__ __forceinline__ int8_t fill() const { return ASYM ? quant_clamp_int8(zero) : int8_t{0}; }
};

// VEC int8 values, as one aligned store writes them.
template <int VEC>
struct alignas(VEC) QuantPack {
  int8_t b[VEC];
};

// VEC finite values quantized with a valid scale. (Callers branch on the scale's validity once per
// row or group, outside their loops.)
template <int VEC, bool ASYM>
__device__ __forceinline__ QuantPack<VEC> quantize_pack(const float (&v)[VEC], const Quantizer<ASYM>& qz) {
  QuantPack<VEC> pack;
  const QuantDivisor& scale = qz.divisor;
  // The scalar layouts (VEC == 1, the fallback for unaligned rows) keep the plain division:
  // both paths per element would cost them registers (spills on sm_75) for little gain.
  if (VEC > 1 && scale.fast) {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      pack.b[i] = ASYM ? quant_value_asym_fast(v[i], scale, qz.zero) : quant_value_fast(v[i], scale);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i)
      pack.b[i] = ASYM ? quant_value_asym_finite(v[i], scale.scale, qz.zero) : quant_value_finite(v[i], scale.scale);
  }
  return pack;
}

// The same stored with one aligned store of VEC bytes.
template <int VEC, bool ASYM>
__device__ __forceinline__ void store_quantized(int8_t* dst, const float (&v)[VEC], const Quantizer<ASYM>& qz) {
  *reinterpret_cast<QuantPack<VEC>*>(dst) = quantize_pack<VEC>(v, qz);
}

// Stores VEC values with qz, or its fill where the scale is invalid.
template <int VEC, bool ASYM>
__device__ __forceinline__ void store_group(int8_t* dst, const float (&v)[VEC], const Quantizer<ASYM>& qz) {
  if (qz.valid()) {
    store_quantized<VEC>(dst, v, qz);
  } else {
    store_fill<VEC>(dst, qz.fill());
  }
}

template <int VEC, bool ASYM>
__device__ __forceinline__ void fold_all(QuantRange<ASYM>& r, const float (&v)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) r.fold(v[i]);
}

template <int VEC>
__device__ __forceinline__ float abs_max(float m, const float (&v)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) m = amax_fold(m, v[i]);
  return m;
}

// hadamard_block (common/quantize_params.h) of a block of kScaleBlock values held by 128 / VEC
// consecutive lanes, VEC consecutive values each (lane l holds the block's vector l mod
// 128 / VEC): the butterflies of strides below VEC in registers, those of strides VEC .. 64
// between lanes (lane l with l ^ (stride / VEC), the lower lane keeping the sum), in the same
// order, then each value times kHadamardNorm: the same bits. Every lane of the warp must call it.
template <int VEC>
__device__ __forceinline__ void hadamard128(float (&v)[VEC]) {
  static_assert(VEC > 1 && kScaleBlock % VEC == 0 && kScaleBlock / VEC <= kWarp, "a block spans at most a warp");
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int h = 1; h < VEC; h *= 2) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      if ((i & h) == 0) hadamard_pair(v[i], v[i + h]);
    }
  }
#pragma unroll
  for (int m = 1; m < kScaleBlock / VEC; m *= 2) {
    const bool upper = (lane & m) != 0;
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
      const float other = __shfl_xor_sync(0xffffffffu, v[i], m);
      v[i] = upper ? __fsub_rn(other, v[i]) : __fadd_rn(v[i], other);
    }
  }
#pragma unroll
  for (int i = 0; i < VEC; ++i) v[i] = __fmul_rn(v[i], kHadamardNorm);
}

// Max over aligned groups of WIDTH lanes (xor offsets below WIDTH never leave the group), NaN
// propagating. Every lane of the warp must call it.
template <int WIDTH = kWarp>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) v = ptx::max_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// v summed over the warp.
__device__ __forceinline__ int32_t warp_sum(int32_t v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// v reduced over the block by `warp_reduce` (a warp's reduction; `none`, its identity, stands for
// the lanes past the block's warps), returned to every thread. Each warp reduces all the partials
// itself, so no second broadcast is needed; the final barrier lets the caller reuse `partials` at
// once.
template <class T, class WarpReduce>
__device__ __forceinline__ T block_reduce(T v, T* partials, T none, WarpReduce warp_reduce) {
  v = warp_reduce(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  v = warp_reduce(lane < static_cast<int>(blockDim.x / kWarp) ? partials[lane] : none);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float block_max(float v, float* partials) {
  return block_reduce(v, partials, 0.f, [](float x) { return warp_max(x); });
}

__device__ __forceinline__ int32_t block_sum(int32_t v, int32_t* partials) {
  return block_reduce(v, partials, 0, [](int32_t x) { return warp_sum(x); });
}

}  // namespace tcgemm::quant

// 16-byte global loads through the read-only path (sm_80+), one wrapper per cache behaviour.
#pragma once

#include <cstdint>

namespace tcgemm::ptx {

// ld.global.nc.v4: data many warps read again (kept in L1).
__device__ __forceinline__ uint4 ld_global_nc_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// ld.global.nc.L1::no_allocate.L2::cache_hint.v4: data streamed once (not kept in L1, L2 policy
// from createpolicy, ptx/cache_policy.cuh).
__device__ __forceinline__ uint4 ld_global_stream_v4(const void* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

}  // namespace tcgemm::ptx

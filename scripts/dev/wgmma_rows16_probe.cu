// Whether wgmma with the 4-bit weight as its register operand streams W4A8 decode at 16 rows faster
// than the few-rows kernel's mma.sync (docs/design/int4.md, "Still open": the 16-row kernel waits on
// each warp's chain of A loads, group scales and mma latency). A timing probe, not a library path:
// int32 D only, K a multiple of 128, two-level weights (the group scale applied while unpacking,
// so one int32 accumulator runs over all of K), exact against a plain reference kernel.
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I csrc -o /tmp/wgmma_rows16 \
//     scripts/dev/wgmma_rows16_probe.cu && /tmp/wgmma_rows16
//
// The kernel: one block per SM, four warpgroups. The block first copies x (16 x K int8) into shared
// memory, each K block of 128 as a [16][128] tile in the 128-byte swizzle wgmma reads, its K order
// permuted (below). Each warpgroup then walks work units (64 weight rows x one of `split` K ranges),
// its items (unit, K block) as one stream: the packed words of item i + Depth are loaded
// (ld.global.nc, 16 bytes per row and lane) while item i is unpacked into the A fragment of four
// m64n16k32 wgmma. A unit's 8 sums per thread are stored into D, or with a K split added into it
// (red.global.add; D zeroed first).
//   K order: lane t = lane % 4 of the fragment owns K values 32t .. 32t + 31 of each K block (one
//   16-byte load of a row), so k-step s reads its packed word s: unpack_int4x8_scaled's lo (k = 32t
//   + 8s .. + 3) is fragment register 0 (row g) or 1 (row g + 8), hi (+4 .. +7) register 2 or 3.
//   x's K block tile holds, at k-step s, column 4t + i the value k = 32t + 8s + i and at column 16 +
//   4t + i the value k = 32t + 8s + 4 + i: a product over a K block is a sum, in any order.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "common/int4.h"
#include "ptx/cp_async.cuh"
#include "ptx/ld_global.cuh"
#include "ptx/smem.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "graph_time.cuh"  // scripts/dev

namespace {

using namespace tcgemm;

constexpr int kRows = 16;          // x rows (wgmma N)
constexpr int kTileRows = 64;      // weight rows per unit (wgmma M)
constexpr int kWarpgroups = 4;
constexpr int kThreads = 128 * kWarpgroups;

__device__ __forceinline__ void wgmma_m64n16k32_rs(int32_t (&d)[8], const uint32_t (&a)[4], uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.s32.s8.s8 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// ld.global.nc.L1::no_allocate.L2::256B.v4: a row's next K blocks come into L2 with this one.
__device__ __forceinline__ uint4 ld_stream_l2_256(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void red_add(int32_t* p, int32_t v) {
  asm volatile("red.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

struct Args {
  const int8_t* x;        // [16, K]
  const uint8_t* w;       // [N, K / 2]
  const int8_t* gs;       // [N, K / 128]
  int32_t* d;             // [16, N], zeroed
  int n, k, split;
};

// L2Block256: the weight loads ask L2 for 256-byte blocks (else plain ld.global.nc). NoMma: the
// unpacked words are folded into the sums by XOR instead of wgmma (wrong results: what the loads
// and the unpacking alone take).
template <int Depth, bool L2Block256, bool NoMma = false>
__global__ void __launch_bounds__(kThreads, 1) rows16_kernel(const Args args) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* xs = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) / 1024 * 1024);
  const int k_blocks = args.k / 128;
  // x into shared memory, 4 bytes at a time (cp.async): thread (n, pw) copies word pw of row n's
  // K block tile, for every K block; that word is 4 values consecutive in x.
  {
    static_assert(kThreads == kRows * 32, "a thread per row and word of a K block tile");
    const int n = threadIdx.x / 32, pw = threadIdx.x % 32;
    const int s = pw / 8, sl = pw % 8, p = 4 * pw;
    const int8_t* src = args.x + static_cast<int64_t>(n) * args.k + 32 * (sl % 4) + 8 * s + 4 * (sl / 4);
    const uint32_t dst = ptx::smem_addr(xs) + n * 128 + (((p / 16) ^ (n % 8)) * 16) + p % 16;
    for (int kb = 0; kb < k_blocks; ++kb)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst + kb * 2048), "l"(src + kb * 128) : "memory");
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
  }
  ptx::fence_proxy_async_shared();
  __syncthreads();

  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = (args.n + kTileRows - 1) / kTileRows;
  // Work: split > 0: units of one tile and one of `split` K ranges, stride apart; split 0: one
  // contiguous share of the (tile, K block) items per warpgroup (stream-K), tiles shared at the
  // ends of shares. A position: flat item i = tile * k_blocks + kb, in a stretch ending at end.
  const int stride = gridDim.x * kWarpgroups;
  const int units = args.split > 0 ? tiles * args.split : stride;
  const int total = tiles * k_blocks;
  const int kb_per_split = args.split > 0 ? (k_blocks + args.split - 1) / args.split : 0;
  const int first = blockIdx.x * kWarpgroups + wg;
  const uint64_t desc0 = ptx::wgmma_desc_k_major_sw128(xs);
  struct Pos {
    int i, end, unit;
  };
  auto stretch = [&](int unit) {
    Pos p{0, 0, unit};
    if (unit >= units) return p;
    if (args.split > 0) {
      const int tile = unit / args.split, part = unit % args.split;
      p.i = tile * k_blocks + part * kb_per_split;
      p.end = tile * k_blocks + min(k_blocks, (part + 1) * kb_per_split);
    } else {
      p.i = static_cast<int>(static_cast<int64_t>(unit) * total / stride);
      p.end = static_cast<int>(static_cast<int64_t>(unit + 1) * total / stride);
    }
    return p;
  };
  auto valid = [&](const Pos& p) { return p.unit < units && p.i < p.end; };
  auto next = [&](Pos p) {
    if (++p.i >= p.end) p = stretch(p.unit + stride);
    return p;
  };
  auto load = [&](const Pos& p, uint4 (&wv)[2], uint32_t (&sc)[2]) {
    if (valid(p)) {
      const int tile = p.i / k_blocks, kb = p.i % k_blocks;
      const int row0 = tile * kTileRows + 16 * warp + g;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = min(row0 + 8 * h, args.n - 1);
        const uint8_t* at = args.w + static_cast<int64_t>(row) * (args.k / 2) + kb * 64 + 16 * t;
        wv[h] = L2Block256 ? ld_stream_l2_256(at) : ptx::ld_global_nc_v4(at);
        sc[h] = static_cast<uint32_t>(args.gs[static_cast<int64_t>(row) * k_blocks + kb]);
      }
    }
  };

  uint4 wv[Depth][2];
  uint32_t sc[Depth][2];
  Pos issue = stretch(first);
  Pos cur = issue;
#pragma unroll
  for (int i = 0; i < Depth; ++i) {
    load(issue, wv[i], sc[i]);
    issue = next(issue);
  }
  int32_t acc[1][8];  // one m64n16 piece
  bool fresh = true;
  while (valid(cur)) {
#pragma unroll
    for (int i = 0; i < Depth; ++i) {
      if (!valid(cur)) break;
      uint32_t a[4][4];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const uint32_t w0 = s == 0 ? wv[i][0].x : s == 1 ? wv[i][0].y : s == 2 ? wv[i][0].z : wv[i][0].w;
        const uint32_t w1 = s == 0 ? wv[i][1].x : s == 1 ? wv[i][1].y : s == 2 ? wv[i][1].z : wv[i][1].w;
        unpack_int4x8_scaled(w0, sc[i][0], a[s][0], a[s][2]);
        unpack_int4x8_scaled(w1, sc[i][1], a[s][1], a[s][3]);
      }
      load(issue, wv[i], sc[i]);
      issue = next(issue);
      if constexpr (NoMma) {
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int r = 0; r < 8; ++r) acc[0][r] = (fresh && s == 0 ? 0 : acc[0][r]) ^ static_cast<int32_t>(a[s][r % 4]);
      } else {
        ptx::wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s)
          wgmma_m64n16k32_rs(acc[0], a[s], ptx::wgmma_desc_advance(desc0, cur.i % k_blocks * 2048 + 32 * s),
                             !fresh || s > 0);
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>(acc);
      }
      fresh = false;
      if ((cur.i + 1) % k_blocks == 0 || cur.i + 1 == cur.end) {
        // d[4j + 2h + e]: weight row 16 warp + g + 8h, x row 8j + 2t + e.
        const int row_base = cur.i / k_blocks * kTileRows + 16 * warp + g;
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int j = r / 4, h = (r / 2) % 2, e = r % 2;
          const int row = row_base + 8 * h;
          int32_t* out = args.d + static_cast<int64_t>(8 * j + 2 * t + e) * args.n + row;
          if (row < args.n) {
            if (args.split == 1) {
              *out = acc[0][r];
            } else {
              red_add(out, acc[0][r]);
            }
          }
        }
        fresh = true;
      }
      cur = next(cur);
    }
  }
}

// D[m][r] = sum_k x[m][k] * q[r][k] * gs[r][k / 128], one thread per output.
__global__ void reference_kernel(const Args args) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (r >= args.n) return;
  int32_t sum = 0;
  for (int k = 0; k < args.k; ++k) {
    const int q = int4_nibble(args.w[static_cast<int64_t>(r) * (args.k / 2) + k / 2], k % 2 == 1);
    sum += static_cast<int32_t>(args.x[static_cast<int64_t>(m) * args.k + k]) * q * args.gs[static_cast<int64_t>(r) * (args.k / 128) + k / 128];
  }
  args.d[static_cast<int64_t>(m) * args.n + r] = sum;
}

uint32_t lcg(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<uint32_t>(s >> 33);
}

struct Layer {
  const char* name;
  int k, n;
};

}  // namespace

int main() {
  const Layer layers[] = {{"8B qkv", 4096, 6144},   {"8B o", 4096, 4096},      {"8B gate+up", 4096, 28672},
                          {"8B down", 14336, 4096}, {"70B qkv", 8192, 10240}, {"70B o", 8192, 8192}};
  int sms = 0;
  TCGEMM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  constexpr int kDepth = 4;
  printf("| layer | K->N | loads | split | us per launch | packed GB/s | exact |\n|---|---|---|---:|---:|---:|---|\n");
  for (const Layer& L : layers) {
    const int64_t wbytes = static_cast<int64_t>(L.n) * L.k / 2;
    const int copies = static_cast<int>(std::max<int64_t>(2, (200ll << 20) / wbytes + 1));
    uint64_t seed = 12345 + L.n;
    std::vector<uint8_t> hw(wbytes);
    std::vector<int8_t> hx(static_cast<size_t>(kRows) * L.k), hg(static_cast<size_t>(L.n) * (L.k / 128));
    for (auto& b : hw) b = static_cast<uint8_t>(lcg(seed));
    for (auto& b : hx) b = static_cast<int8_t>(lcg(seed));
    for (auto& b : hg) b = static_cast<int8_t>(1 + lcg(seed) % 16);
    int8_t *x, *gs;
    uint8_t* w;
    int32_t *d, *ref;
    TCGEMM_CUDA_CHECK(cudaMalloc(&x, hx.size()));
    TCGEMM_CUDA_CHECK(cudaMalloc(&gs, hg.size()));
    TCGEMM_CUDA_CHECK(cudaMalloc(&w, wbytes * copies));
    TCGEMM_CUDA_CHECK(cudaMalloc(&d, sizeof(int32_t) * kRows * L.n));
    TCGEMM_CUDA_CHECK(cudaMalloc(&ref, sizeof(int32_t) * kRows * L.n));
    TCGEMM_CUDA_CHECK(cudaMemcpy(x, hx.data(), hx.size(), cudaMemcpyHostToDevice));
    TCGEMM_CUDA_CHECK(cudaMemcpy(gs, hg.data(), hg.size(), cudaMemcpyHostToDevice));
    for (int c = 0; c < copies; ++c)
      TCGEMM_CUDA_CHECK(cudaMemcpy(w + c * wbytes, hw.data(), wbytes, cudaMemcpyHostToDevice));
    Args a{x, w, gs, ref, L.n, L.k, 1};
    reference_kernel<<<dim3((L.n + 127) / 128, kRows), 128>>>(a);
    TCGEMM_CHECK_LAUNCH();
    std::vector<int32_t> href(static_cast<size_t>(kRows) * L.n), hd(href.size());
    TCGEMM_CUDA_CHECK(cudaMemcpy(href.data(), ref, href.size() * 4, cudaMemcpyDeviceToHost));
    const int smem = kRows * L.k + 1024;
    for (int variant = 0; variant < 3; ++variant)
    for (int split : {1, 2, 4, 8, 0}) {
      const auto kernel = variant == 0   ? rows16_kernel<kDepth, false>
                          : variant == 1 ? rows16_kernel<kDepth, true>
                                         : rows16_kernel<kDepth, true, true>;
      TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
      if (L.k / 128 < split) continue;
      a.d = d;
      a.split = split;
      TCGEMM_CUDA_CHECK(cudaMemset(d, 0x7f, sizeof(int32_t) * kRows * L.n));  // poisoned (zeroed where the split adds)
      if (split != 1) TCGEMM_CUDA_CHECK(cudaMemset(d, 0, sizeof(int32_t) * kRows * L.n));
      kernel<<<sms, kThreads, smem>>>(a);
      TCGEMM_CHECK_LAUNCH();
      TCGEMM_CUDA_CHECK(cudaMemcpy(hd.data(), d, hd.size() * 4, cudaMemcpyDeviceToHost));
      const bool exact = hd == href;
      // A CUDA graph of kLaunches launches on rotated weight copies (each after zeroing D where
      // the split adds into it): the median of 7 replays over kLaunches.
      constexpr int kLaunches = 24;
      cudaStream_t stream;
      TCGEMM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      const float us = graph_us_per_launch(stream, kLaunches, [&](int it) {
        a.w = w + (it % copies) * wbytes;
        if (split != 1) TCGEMM_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(int32_t) * kRows * L.n, stream));
        kernel<<<sms, kThreads, smem, stream>>>(a);
        TCGEMM_CHECK_LAUNCH();
      });
      TCGEMM_CUDA_CHECK(cudaStreamDestroy(stream));
      const char* loads = variant == 0 ? "nc" : variant == 1 ? "L2::256B" : "L2::256B, no wgmma";
      const std::string how = split == 0 ? "stream-K" : std::to_string(split);
      printf("| %s | %d->%d | %s | %s | %.1f | %.0f | %s |\n", L.name, L.k, L.n, loads, how.c_str(), us,
             wbytes / (us * 1e3), variant == 2 ? "-" : exact ? "yes" : "NO");
      a.w = w;
    }
    TCGEMM_CUDA_CHECK(cudaFree(x));
    TCGEMM_CUDA_CHECK(cudaFree(gs));
    TCGEMM_CUDA_CHECK(cudaFree(w));
    TCGEMM_CUDA_CHECK(cudaFree(d));
    TCGEMM_CUDA_CHECK(cudaFree(ref));
  }
  return 0;
}

// A packed 4-bit B unpacked by the sm90 kernel while it computes (GemmProblem::b_unpack), for
// prefill rows, where the GEMM is bound by its MACs and unpacking in shared memory between wgmma
// costs more than it saves (docs/design/int4.md). Instead of a separate pass that writes the int8
// weight before the GEMM starts, warps 1-3 of every block's producer warpgroup, which issue no
// copies, write it into B's buffer from inside the GEMM: the int8 tensor cores run the int8
// kernel unchanged, and the unpacking takes memory bandwidth and issue slots the consumers leave.
//   Work: a warp grabs chunks from a counter (flags[0]), one chunk being 8 rows of one column
//     tile over a segment of 1024 values, 32 per lane (one 16-byte load per row, four rows in
//     flight, the nine-instruction unpacking per 8 values of common/int4.h, two 16-byte stores).
//     Grabbing rather than a fixed share keeps any resident warp able to finish any chunk: no
//     block waits on another block's being resident. The next chunk is grabbed as one starts.
//   Order: the tiles go column tile by column tile, every tile row of one before the next
//     (configs.h: LargeUnpacking), so the first wave of blocks needs about grid / tiles_m column
//     tiles; chunks go by bands of that many column tiles, segment by segment, so every block of
//     the first wave gets its first K segment early, then the next.
//   Flags: after a chunk, each lane fences its stores (the async proxy will read them, at GPU
//     scope), the warp meets, and lane 0 adds 1 to the piece's flag with release semantics. The
//     producer thread, before the loads of a K block that starts a segment (or a unit), polls the
//     piece's flag with acquire loads until all kBN / 8 chunks are in, then fences the async
//     proxy before its TMA copies.
#pragma once

#include <cstdint>

#include "common/int4.h"
#include "kernels/sm90/sm90_unpack_ahead.h"
#include "ptx/gpu_flag.cuh"
#include "ptx/ld_global.cuh"
#include "ptx/tma.cuh"

namespace tcgemm::sm90 {

__device__ __forceinline__ uint32_t* unpack_flag(const UnpackAhead& u, int col, int segment) {
  return u.src.flags + 1 + col * u.segments + segment;
}

// The producer: waits until K block kb of column tile `col` is unpacked (called for the first K
// block of a unit and of each segment).
template <class Cfg>
__device__ __forceinline__ void wait_unpacked(const UnpackAhead& u, int col, int kb) {
  constexpr uint32_t kChunks = Cfg::kBN / kUnpackChunkRows;
  const uint32_t* flag = unpack_flag(u, col, kb * Cfg::kBK / kUnpackSegmentK);
  while (ptx::ld_acquire_gpu(flag) < kChunks) ptx::nanosleep(128);
  ptx::fence_proxy_async_global();
}

// One warp of the producer warpgroup: grabs and unpacks chunks until none is left.
template <class Cfg>
__device__ __forceinline__ void unpack_ahead(const UnpackAhead& u, int tiles_n, int lane) {
  static_assert(Cfg::kBN % kUnpackChunkRows == 0 && Cfg::kBN >= kUnpackMinTileCols, "chunks of whole rows");
  static_assert(kUnpackSegmentK == 32 * 32, "a lane's 32 values of a segment");
  constexpr int kChunksPerPiece = Cfg::kBN / kUnpackChunkRows;
  constexpr int kRowsInFlight = 4;  // rows whose loads go out together
  const int band_chunks = u.band_cols * u.segments * kChunksPerPiece;
  const int total = tiles_n * u.segments * kChunksPerPiece;
  // The next chunk is grabbed as the current one starts: the counter's round trip overlaps it.
  uint32_t grabbed = 0;
  if (lane == 0) grabbed = ptx::atom_relaxed_gpu_add(u.src.flags, 1);
  for (;;) {
    const int chunk = static_cast<int>(__shfl_sync(0xffffffffu, grabbed, 0));
    if (chunk >= total) return;
    if (lane == 0) grabbed = ptx::atom_relaxed_gpu_add(u.src.flags, 1);
    const int band = chunk / band_chunks;
    int rest = chunk - band * band_chunks;
    const int cols = min(u.band_cols, tiles_n - band * u.band_cols);
    const int segment = rest / (cols * kChunksPerPiece);
    rest -= segment * cols * kChunksPerPiece;
    const int col = band * u.band_cols + rest / kChunksPerPiece;
    const int row0 = col * Cfg::kBN + rest % kChunksPerPiece * kUnpackChunkRows;
    const int k0 = segment * kUnpackSegmentK + 32 * lane;  // this lane's 32 values
    const int rows = min(kUnpackChunkRows, u.n - row0);
    if (k0 < u.k) {
      // 32-bit strides: the rows' offsets within a chunk (8 rows) fit, and the loop stays within
      // the producer warpgroup's registers.
      const int packed_stride = static_cast<int>(u.src.packed_stride), out_stride = static_cast<int>(u.out_stride);
      const int scale_stride = static_cast<int>(u.src.group_scale_stride);
      const uint8_t* src = u.src.packed + row0 * u.src.packed_stride + k0 / 2;
      int8_t* dst = u.out + row0 * u.out_stride + k0;
      const int8_t* scale =
          u.src.group_scale == nullptr ? nullptr : u.src.group_scale + row0 * u.src.group_scale_stride + k0 / 128;
#pragma unroll 1
      for (int r0 = 0; r0 < kUnpackChunkRows; r0 += kRowsInFlight) {
        uint4 packed[kRowsInFlight];
        uint32_t s[kRowsInFlight];
#pragma unroll
        for (int i = 0; i < kRowsInFlight; ++i) {
          if (r0 + i < rows) {
            packed[i] = ptx::ld_global_nc_v4(src + (r0 + i) * packed_stride);
            s[i] = scale == nullptr ? 1u : static_cast<uint32_t>(scale[(r0 + i) * scale_stride]);
          }
        }
#pragma unroll
        for (int i = 0; i < kRowsInFlight; ++i) {
          if (r0 + i < rows) {
            uint32_t v[8];
            unpack_int4x8_scaled(packed[i].x, s[i], v[0], v[1]);
            unpack_int4x8_scaled(packed[i].y, s[i], v[2], v[3]);
            unpack_int4x8_scaled(packed[i].z, s[i], v[4], v[5]);
            unpack_int4x8_scaled(packed[i].w, s[i], v[6], v[7]);
            uint4* out = reinterpret_cast<uint4*>(dst + (r0 + i) * out_stride);
            out[0] = make_uint4(v[0], v[1], v[2], v[3]);
            out[1] = make_uint4(v[4], v[5], v[6], v[7]);
          }
        }
      }
      ptx::fence_proxy_async_global();
    }
    ptx::fence_acq_rel_gpu();
    __syncwarp();
    if (lane == 0) ptx::red_release_gpu_add(unpack_flag(u, col, segment), 1);
  }
}

}  // namespace tcgemm::sm90

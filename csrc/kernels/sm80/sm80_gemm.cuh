// The Ampere-class int8 GEMM: mma.sync m16n8k32 fed by ldmatrix from XOR-swizzled shared memory,
// a multistage cp.async pipeline, grouped tile rasterization for L2 reuse.
// Both operands are K-major (A row-major, B column-major) with 16-byte aligned rows; the binding
// layer makes such a copy of any operand that is not. M, N and K tails are predicated in-kernel.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "common/cuda_check.h"
#include "common/launch_kernel.cuh"
#include "common/math.h"
#include "common/problem.h"
#include "epilogue/block_scales.h"
#include "epilogue/epilogues.h"
#include "epilogue/out_store.cuh"
#include "kernels/sm80/configs.h"
#include "kernels/sm80/sm80_gemm.h"
#include "ptx/cp_async.cuh"
#include "ptx/ldmatrix.cuh"
#include "ptx/mma.cuh"

namespace tcgemm::sm80 {

// Chunk c (16 bytes) of row r lives at chunk c ^ (r % 8): the 8 rows an ldmatrix phase reads
// and the 8 chunks a cp.async row writes then fall in 8 distinct bank groups.
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  return row * 128 + ((chunk ^ (row & 7)) << 4);
}

// One thread's share of the cp.async copies that fill a [Rows x 128-byte] K slice of a K-major
// operand. Thread t always copies chunk t % 8 of rows t / 8 + i * (Threads / 8), so its source
// column and swizzled smem column are fixed; only k0 moves from slice to slice.
template <int Rows, int Threads>
struct SliceCopier {
  static constexpr int kRowsPerPass = Threads / 8;
  static constexpr int kCopies = Rows / kRowsPerPass;

  const uint8_t* tile;  // row 0, k 0 of this block's tile: always inside the matrix
  const uint8_t* src;   // (row t / 8, k = chunk * 16) of the tile
  int64_t pass_stride;  // bytes between the rows of consecutive copies
  int dst_offset;       // swizzled offset of that element in a stage
  int rows_left;        // rows of the tile inside the matrix, counted from this thread's first
  int chunk_k;          // chunk * 16

  __device__ __forceinline__ SliceCopier(const uint8_t* rows_base, int64_t ld, int rows_valid) {
    const int row0 = static_cast<int>(threadIdx.x) >> 3;
    const int chunk = static_cast<int>(threadIdx.x) & 7;
    tile = rows_base;
    src = rows_base + static_cast<int64_t>(row0) * ld + chunk * 16;
    pass_stride = kRowsPerPass * ld;
    dst_offset = swizzled_offset(row0, chunk);
    rows_left = rows_valid - row0;
    chunk_k = chunk * 16;
  }

  // Copy i of a slice whose 128 bytes of K lie inside the matrix, read at `cursor`, which then
  // moves to copy i+1 (start it at src + k0). Rows past the matrix are zero-filled without
  // being read, a test that interior tiles (RowsFull) skip.
  template <bool RowsFull>
  __device__ __forceinline__ void copy(uint8_t* stage, int i, const uint8_t*& cursor) const {
    uint8_t* dst = stage + dst_offset + i * kRowsPerPass * 128;
    if constexpr (RowsFull) {
      ptx::cp_async_16(dst, cursor);
    } else {
      const bool in = i * kRowsPerPass < rows_left;
      ptx::cp_async_16_zfill(dst, in ? cursor : tile, in ? 16 : 0);
    }
    cursor += pass_stride;
  }

  // The whole slice with every test: rows past the matrix and bytes past K read as zero.
  __device__ __forceinline__ void copy_masked(uint8_t* stage, int k0, int k) const {
    const int k_bytes = max(0, min(16, k - k0 - chunk_k));
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int bytes = i * kRowsPerPass < rows_left ? k_bytes : 0;
      ptx::cp_async_16_zfill(stage + dst_offset + i * kRowsPerPass * 128,
                             bytes > 0 ? src + k0 + i * pass_stride : tile, bytes);
    }
  }
};

// Maps a linear block index to a (tile_m, tile_n) pair, walking kGroupM tile rows at a time so
// that concurrently running blocks share both A rows and B columns in L2.
template <int GroupM>
__device__ __forceinline__ void rasterize(int pid, int tiles_m, int tiles_n, int& tile_m, int& tile_n) {
  const int group_tiles = GroupM * tiles_n;
  const int first_m = (pid / group_tiles) * GroupM;
  const int group_m = min(tiles_m - first_m, GroupM);
  const int in_group = pid % group_tiles;
  tile_m = first_m + in_group % group_m;
  tile_n = in_group / group_m;
}

// A warp's mma operands: A double-buffered across k-steps, B reloaded pair by pair as soon as a
// pair of n8 tiles has met every A row, which keeps the register footprint small.
template <class Cfg>
struct WarpFragments {
  uint32_t a[2][Cfg::kMmaM][4];
  uint32_t b[Cfg::kMmaN][2];
};

// The A fragments of mma k-step `ks` (32 bytes of K): one ldmatrix.x4 per m16 tile.
template <class Cfg>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[Cfg::kMmaM][4], const uint8_t* sa, int warp_m0,
                                                 int lane, int ks) {
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i) {
    const int row = warp_m0 + i * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ptx::ldmatrix_x4(a[i], sa + swizzled_offset(row, ks * 2 + (lane >> 4)));
  }
}

// The B fragments of n8 tiles 2*jj and 2*jj+1 at k-step `ks`: one ldmatrix.x4.
template <class Cfg>
__device__ __forceinline__ void load_b_pair(uint32_t (&b)[Cfg::kMmaN][2], const uint8_t* sb, int warp_n0, int lane,
                                            int ks, int jj) {
  const int row = warp_n0 + jj * 16 + (lane & 7) + (lane >> 4) * 8;
  uint32_t r[4];
  ptx::ldmatrix_x4(r, sb + swizzled_offset(row, ks * 2 + ((lane >> 3) & 1)));
  b[2 * jj][0] = r[0];
  b[2 * jj][1] = r[1];
  b[2 * jj + 1][0] = r[2];
  b[2 * jj + 1][1] = r[3];
}

// Writes two horizontally adjacent results through the shared epilogue, as one store when allowed.
template <class Epi>
__device__ __forceinline__ void store_pair(const GemmProblem& p, const Epi& epi, typename Epi::OutT* d, bool vec2,
                                           int row, int col, typename Epi::Acc v0, typename Epi::Acc v1) {
  if (row >= p.m || col >= p.n) return;
  using Out = typename Epi::OutT;
  Out* dst = d + static_cast<int64_t>(row) * p.d.ld + col;
  const typename Epi::Row r = epi.row(row);
  const Out x = epi.full(v0, r, epi.col(col), row, col);
  if (col + 1 >= p.n) {
    dst[0] = x;
    return;
  }
  const Out y = epi.full(v1, r, epi.col(col + 1), row, col + 1);
  if (vec2) {
    store_pair_global(dst, x, y);
  } else {
    dst[0] = x;
    dst[1] = y;
  }
}

// Split-K: adds the partial sums of two horizontally adjacent results onto D, which dispatch
// filled with epilogue(0). Integer atomics wrap like the accumulators, so the sum is exact and
// the same in any order.
template <class Epi>
__device__ __forceinline__ void add_split_pair(const GemmProblem& p, const Epi& epi, int row, int col, int32_t v0,
                                               int32_t v1) {
  if (row >= p.m || col >= p.n) return;
  int32_t* dst = static_cast<int32_t*>(p.d.ptr) + static_cast<int64_t>(row) * p.d.ld + col;
  atomicAdd(dst, epi.partial(v0));
  if (col + 1 < p.n) atomicAdd(dst + 1, epi.partial(v1));
}

// Epi: any epilogue (epilogue/epilogues.h); with per-block scales (Epi::kPromotes) every 128-byte
// K slice is one scale block, whose int32 partial sums are promoted into fp32 accumulators.
template <class Cfg, bool ASigned, bool BSigned, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, 1) sm80_gemm_kernel(const GemmProblem p, const Epi epi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* smem_a = smem;
  uint8_t* smem_b = smem + Cfg::kStages * Cfg::kStageBytesA;

  const int tiles_m = ceil_div(p.m, Cfg::kBM);
  const int tiles_n = ceil_div(p.n, Cfg::kBN);
  int tile_m, tile_n;
  rasterize<Cfg::kGroupM>(static_cast<int>(blockIdx.x), tiles_m, tiles_n, tile_m, tile_n);
  const int m0 = tile_m * Cfg::kBM;
  const int n0 = tile_n * Cfg::kBN;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warp_m0 = (warp / Cfg::kWarpsN) * Cfg::kWarpTileM;
  const int warp_n0 = (warp % Cfg::kWarpsN) * Cfg::kWarpTileN;

  const SliceCopier<Cfg::kBM, Cfg::kThreads> copy_a(
      static_cast<const uint8_t*>(p.a.ptr) + static_cast<int64_t>(m0) * p.a.stride_row, p.a.stride_row, p.m - m0);
  const SliceCopier<Cfg::kBN, Cfg::kThreads> copy_b(
      static_cast<const uint8_t*>(p.b.ptr) + static_cast<int64_t>(n0) * p.b.stride_row, p.b.stride_row, p.n - n0);

  // This block's K range: whole 128-byte slices [first, first + k_tiles) of split blockIdx.y.
  const int all_slices = ceil_div(p.k, Cfg::kBK);
  int first = 0;
  int k_tiles = all_slices;
  if constexpr (Cfg::kSplitK) {
    const int per_split = ceil_div(all_slices, p.split_k);
    first = static_cast<int>(blockIdx.y) * per_split;
    k_tiles = min(all_slices, first + per_split) - first;
    if (k_tiles <= 0) return;
  }
  // Integer sums do not care about order, so a partial last K slice is loaded first, in the
  // prologue: every slice the main loop loads is then whole in K and needs no K predicate.
  const int has_tail = p.k % Cfg::kBK != 0 && first + k_tiles == all_slices;
  auto slice_k0 = [&](int t) {
    return (has_tail && t == 0 ? all_slices - 1 : first + t - has_tail) * Cfg::kBK;
  };

  constexpr bool kPerBlock = Epi::kPromotes;
  int32_t acc[Cfg::kMmaM][Cfg::kMmaN][4];
  float accf[kPerBlock ? Cfg::kMmaM : 1][kPerBlock ? Cfg::kMmaN : 1][4];
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kMmaN; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        acc[i][j][r] = 0;
        if constexpr (kPerBlock) accf[i][j][r] = 0.0f;
      }
  const int g = lane >> 2;  // mma C fragment: rows g and g + 8, columns 2t and 2t + 1
  const int t = lane & 3;

  // Prologue: Stages-1 slices in flight (empty groups past the end keep the wait counts uniform).
#pragma unroll
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < k_tiles) {
      copy_a.copy_masked(smem_a + s * Cfg::kStageBytesA, slice_k0(s), p.k);
      copy_b.copy_masked(smem_b + s * Cfg::kStageBytesB, slice_k0(s), p.k);
    }
    ptx::cp_async_commit();
  }
  ptx::cp_async_wait<Cfg::kStages - 2>();
  __syncthreads();

  // The main loop, instantiated twice: tiles with no M/N edge copy without any predicate.
  auto mainloop = [&](auto rows_full) {
    constexpr bool kRowsFull = decltype(rows_full)::value;
    constexpr int kSteps = Cfg::kBK / 32;  // mma k-steps per slice
    constexpr int kPairs = Cfg::kMmaN / 2;
    constexpr int kCopiesA = SliceCopier<Cfg::kBM, Cfg::kThreads>::kCopies;
    constexpr int kCopies = kCopiesA + SliceCopier<Cfg::kBN, Cfg::kThreads>::kCopies;
    constexpr int kSlots = (kSteps - 1) * kPairs;  // the refill's copies go out between mma groups
    constexpr int kPerSlot = (kCopies + kSlots - 1) / kSlots;

    WarpFragments<Cfg> frag;
    load_a_fragments<Cfg>(frag.a[0], smem_a, warp_m0, lane, 0);
#pragma unroll
    for (int jj = 0; jj < kPairs; ++jj) load_b_pair<Cfg>(frag.b, smem_b, warp_n0, lane, 0, jj);

    for (int kt = 0; kt < k_tiles; ++kt) {
      // Per-block: this slice's scales, loaded now and used after its mma.
      [[maybe_unused]] MmaSyncPromotion<Cfg::kMmaM, Cfg::kMmaN> scales;
      if constexpr (kPerBlock) {
        scales.load(epi, m0 + warp_m0, n0 + warp_n0, p.m, p.n, lane, slice_k0(kt) / Cfg::kBK);
      }
      const uint8_t* sa = smem_a + (kt % Cfg::kStages) * Cfg::kStageBytesA;
      const uint8_t* sb = smem_b + (kt % Cfg::kStages) * Cfg::kStageBytesB;
      const uint8_t* next_sa = smem_a + ((kt + 1) % Cfg::kStages) * Cfg::kStageBytesA;
      const uint8_t* next_sb = smem_b + ((kt + 1) % Cfg::kStages) * Cfg::kStageBytesB;
      // Slice kt+Stages-1 refills the stage that every warp finished reading before the last barrier.
      const int refill = kt + Cfg::kStages - 1;
      const bool do_refill = refill < k_tiles;
      uint8_t* fill_a = smem_a + (refill % Cfg::kStages) * Cfg::kStageBytesA;
      uint8_t* fill_b = smem_b + (refill % Cfg::kStages) * Cfg::kStageBytesB;
      const uint8_t* cursor_a = copy_a.src + slice_k0(refill);
      const uint8_t* cursor_b = copy_b.src + slice_k0(refill);
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        const bool last = ks + 1 == kSteps;
        if (last) {
          // Slice kt+1 must have landed (and be visible to all warps) before its fragments load.
          ptx::cp_async_commit();
          ptx::cp_async_wait<Cfg::kStages - 2>();
          __syncthreads();
        }
        const uint8_t* frag_a_src = last ? next_sa : sa;
        const uint8_t* frag_b_src = last ? next_sb : sb;
        const int next_ks = last ? 0 : ks + 1;
        load_a_fragments<Cfg>(frag.a[(ks + 1) & 1], frag_a_src, warp_m0, lane, next_ks);
#pragma unroll
        for (int jj = 0; jj < kPairs; ++jj) {
#pragma unroll
          for (int j = 2 * jj; j < 2 * jj + 2; ++j)
#pragma unroll
            for (int i = 0; i < Cfg::kMmaM; ++i)
              ptx::mma_m16n8k32<ASigned, BSigned>(acc[i][j], frag.a[ks & 1][i], frag.b[j]);
          load_b_pair<Cfg>(frag.b, frag_b_src, warp_n0, lane, next_ks, jj);
#pragma unroll
          for (int c = (ks * kPairs + jj) * kPerSlot; c < (ks * kPairs + jj + 1) * kPerSlot; ++c) {
            if (!last && c < kCopies && do_refill) {
              if (c < kCopiesA) {
                copy_a.template copy<kRowsFull>(fill_a, c, cursor_a);
              } else {
                copy_b.template copy<kRowsFull>(fill_b, c - kCopiesA, cursor_b);
              }
            }
          }
        }
      }
      if constexpr (kPerBlock) {
        scales.promote_into(accf, acc);
#pragma unroll
        for (int i = 0; i < Cfg::kMmaM; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::kMmaN; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0;
      }
    }
  };
  if (p.m - m0 >= Cfg::kBM && p.n - n0 >= Cfg::kBN) {
    mainloop(std::true_type{});
  } else {
    mainloop(std::false_type{});
  }
  ptx::cp_async_wait<0>();

  using Out = typename Epi::OutT;
  Out* d = static_cast<Out*>(p.d.ptr);
  const bool vec2 = (reinterpret_cast<uintptr_t>(d) % (2 * sizeof(Out)) == 0) && (p.d.ld % 2 == 0);
  auto final_acc = [&](int i, int j, int r) -> typename Epi::Acc {
    if constexpr (kPerBlock) {
      return accf[i][j][r];
    } else {
      return acc[i][j][r];
    }
  };
#pragma unroll
  for (int i = 0; i < Cfg::kMmaM; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::kMmaN; ++j) {
      const int row = m0 + warp_m0 + i * 16 + g;
      const int col = n0 + warp_n0 + j * 8 + 2 * t;
      if constexpr (Cfg::kSplitK && Epi::kAddsPartials) {
        if (p.split_k > 1) {
          add_split_pair(p, epi, row, col, acc[i][j][0], acc[i][j][1]);
          add_split_pair(p, epi, row + 8, col, acc[i][j][2], acc[i][j][3]);
          continue;
        }
      }
      store_pair(p, epi, d, vec2, row, col, final_acc(i, j, 0), final_acc(i, j, 1));
      store_pair(p, epi, d, vec2, row + 8, col, final_acc(i, j, 2), final_acc(i, j, 3));
    }
  }
#endif
}

template <class Cfg, class Epi, bool ASigned, bool BSigned>
void launch_kernel(const GemmProblem& p, const Epi& epi) {
  constexpr auto kernel = sm80_gemm_kernel<Cfg, ASigned, BSigned, Epi>;
  allow_dynamic_smem<kernel, Cfg::kSmemBytes>();
  const int64_t tiles = static_cast<int64_t>(ceil_div(p.m, Cfg::kBM)) * ceil_div(p.n, Cfg::kBN);
  const int splits = Cfg::kSplitK && Epi::kAddsPartials ? p.split_k : 1;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(p, epi);
  TCGEMM_CHECK_LAUNCH();
}

// One block per output tile and K split.
template <class Cfg, class Epi>
void launch(const GemmProblem& p, const Epi& epi) {
  if constexpr (!config_serves<Cfg, Epi>()) {
    throw std::logic_error("tcgemm: this sm80 tile config is not built for this epilogue");
  } else {
    with_operand_signs<Epi>(p, [&](auto a_signed, auto b_signed) {
      launch_kernel<Cfg, Epi, decltype(a_signed)::value, decltype(b_signed)::value>(p, epi);
    });
  }
}

}  // namespace tcgemm::sm80

// The launchers of one tile config for every epilogue it serves (one translation unit per config).
#define TCGEMM_SM80_INSTANTIATE_ONE(Epi, Cfg) \
  template void tcgemm::sm80::launch<Cfg, Epi>(const tcgemm::GemmProblem&, const Epi&);

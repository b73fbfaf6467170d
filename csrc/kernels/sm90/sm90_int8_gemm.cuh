// Hopper int8 GEMM: TMA loads into a multistage shared-memory ring, wgmma from swizzled shared
// memory, warp specialization and a persistent tile loop.
//
//   warpgroup 0 (producer): one thread walks the block's work units and, for every 128-byte K
//     block, waits until the ring slot is free ("empty" mbarrier), then has TMA copy the A and B
//     boxes into it and land on the slot's "full" mbarrier (L2 hint evict_last for boxes other
//     tiles read again, evict_first for an operand only one tile row or column reads). The other producer threads leave early after giving
//     back registers (setmaxnreg.dec).
//   warpgroups 1.. (consumers): per slot, wait on "full", issue MmaM x 4 m64nWNk32 wgmma
//     (K = 128 bytes), and once those have retired (wait_group with the next group in flight)
//     free the previous slot. Cooperative configs split each tile between the warpgroups;
//     ping-pong configs give alternate tiles to the two warpgroups, taking turns on named
//     barriers so one's epilogue runs under the other's main loop.
//   epilogue (a functor, Int32Epilogue or ScaledEpilogue): each warp stages its values 128 bytes
//     of columns at a time in swizzled shared memory and one lane issues a TMA store (a TMA
//     reduce-add under split-K, evict_first), then the warp goes on to its next tile while the
//     stores drain. The int32 epilogue's offsets and beta * C are a second, row-wise pass over
//     the staged chunk. An output TMA cannot describe gets direct register stores (wrapping
//     atomics under split-K).
//   per-block scales (ScaledEpilogue<Out, true>): each 128-deep K block's int32 partial sums are
//     folded into fp32 accumulators with that block's scales (promotion). Two int32 sets take the
//     K blocks in turn, so one block is promoted while the next one's wgmma run.
//
// Work units are output tiles in grouped order (GroupM tile rows per group, for L2 reuse of B),
// times split_k ranges of K. Units go round-robin to gridDim.x <= #SMs resident blocks, and
// every role walks the same sequence, so the ring's slot/phase counters stay in step.
// Out-of-range rows and K columns arrive as zeros from TMA; TMA stores clip at the edges of D.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <cstdint>
#include <type_traits>

#include <cuda.h>

#include "common/cuda_check.h"
#include "common/gemm_params.h"
#include "common/math.h"
#include "epilogue/chunk_cols.cuh"
#include "epilogue/int32_epilogue.h"
#include "epilogue/out_store.cuh"
#include "epilogue/scaled_epilogue.h"
#include "kernels/sm90/sm90_int8_gemm.h"
#include "kernels/sm90/sm90_tensor_map.h"
#include "ptx/cache_policy.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "ptx/warpgroup.cuh"
#include "ptx/wgmma.cuh"

namespace tcgemm::sm90 {

// Problem description the kernel needs beyond the two tensor maps and the epilogue functor.
struct Sm90Args {
  int m, n;
  int k_blocks;         // ceil(K / 128)
  int k_blocks_split;   // K blocks per split (the last split may have fewer)
  int split_k;
  int tiles_m, tiles_n;
  int a_box_rows;       // rows of A a stage loads: BM, or M rounded up to 8 when M < BM (rest zero)
  void* d;              // [M, N] of the epilogue's OutT, unit stride along N
  int64_t ldd;
  bool d_vec2;          // column pairs of D are aligned: they go out as one store
  bool d_tma;           // D is written through its tensor map (TMA reduce-add with split-K)
};

// One unit of work: an output tile and its range of K blocks.
struct WorkUnit {
  int tile_m, tile_n;
  int kb_begin, kb_end;
};

template <int GroupM>
__device__ __forceinline__ WorkUnit work_unit(const Sm90Args& args, int unit) {
  const int tiles = args.tiles_m * args.tiles_n;
  const int split = unit / tiles;  // concurrent blocks share a K range: their A and B rows overlap in L2
  const int tile = unit - split * tiles;
  const int group_size = GroupM * args.tiles_n;
  const int group = tile / group_size;
  const int first_m = group * GroupM;
  const int rows_in_group = min(args.tiles_m - first_m, GroupM);
  const int in_group = tile - group * group_size;
  WorkUnit w;
  w.tile_m = first_m + in_group % rows_in_group;
  w.tile_n = in_group / rows_in_group;
  w.kb_begin = split * args.k_blocks_split;
  w.kb_end = min(args.k_blocks, w.kb_begin + args.k_blocks_split);
  return w;
}

// Writes one thread's accumulator fragment: rows row0 and row0 + 8, columns col0 + 8j + {0, 1}.
template <int WN, class Epi>
__device__ __forceinline__ void store_fragment(const Sm90Args& args, const Epi& epi,
                                               const typename Epi::Acc (&acc)[WN / 2], int row0, int col0) {
  using Out = typename Epi::OutT;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= args.m) continue;
    Out* d_row = static_cast<Out*>(args.d) + static_cast<int64_t>(row) * args.ldd;
    const typename Epi::Row r = epi.row(row);
#pragma unroll
    for (int j = 0; j < WN / 8; ++j) {
      const int col = col0 + 8 * j;
      if (col >= args.n) continue;
      const typename Epi::Acc acc0 = acc[4 * j + 2 * h], acc1 = acc[4 * j + 2 * h + 1];
      const bool pair = col + 1 < args.n;
      if constexpr (std::is_same_v<Epi, Int32Epilogue>) {
        if (args.split_k > 1) {
          // Every split adds its scaled partial sum; dispatch prefilled D with epilogue(0).
          atomicAdd(d_row + col, epi.scale(acc0));
          if (pair) atomicAdd(d_row + col + 1, epi.scale(acc1));
          continue;
        }
      }
      const Out v0 = epi.full(acc0, r, epi.col(col), row, col);
      if (!pair) {
        d_row[col] = v0;
        continue;
      }
      const Out v1 = epi.full(acc1, r, epi.col(col + 1), row, col + 1);
      if (args.d_vec2) {
        store_pair_global(d_row + col, v0, v1);
      } else {
        d_row[col] = v0;
        d_row[col + 1] = v1;
      }
    }
  }
}

// Writes one warp's 16 x WN piece of the result through TMA, 128 bytes of columns (kCols) at a
// time, in two passes that keep the unrolled code small (it runs once per tile and must not
// thrash the instruction cache):
//   1. every lane stores epilogue.apply(its accumulators) into the staging buffer. Lane l holds
//      rows l/4 + {0, 8} and columns 8j + 2*(l%4) + {0, 1} of the warp's piece (ptx/wgmma.cuh);
//      the buffer is [16][128 bytes] with TMA's 128-byte swizzle (16-byte chunk c of row r at
//      chunk c ^ (r % 8)), which also keeps these stores free of bank conflicts;
//   2. only when the int32 epilogue has offsets or a C term: each lane finishes 16 consecutive
//      elements of one row (C read row-wise), a plain loop.
// Lane 0 issues the copy and owns the warp's bulk groups; a buffer is refilled once the store
// issued from it two chunks earlier (counted across tiles in `chunks_issued`) has read it.
// With split-K the copy is a reduce-add onto D.
template <class Cfg, class Epi>
__device__ __forceinline__ void store_warp_tile(const Sm90Args& args, const Epi& epi, const CUtensorMap* map_d,
                                                const typename Epi::Acc (&acc)[Cfg::kAccRegs], uint8_t* staging,
                                                int row_base, int col_base, int lane, uint32_t& chunks_issued) {
  using Out = typename Epi::OutT;
  constexpr int kCols = Cfg::kEpiRowBytes / static_cast<int>(sizeof(Out));
  constexpr bool kInt32 = std::is_same_v<Epi, Int32Epilogue>;
  // Split-K: D was prefilled with the rest of the epilogue; each split adds alpha * its sum.
  const bool split = args.split_k > 1;
  const bool finish = kInt32 && !split && epi.needs_finish();
  const int xor_chunk = (lane / 4) % 8;  // r % 8 for both of this lane's rows
  const uint32_t staging_addr = ptx::smem_addr(staging);
  // Rows and columns past the edge of D are computed (TMA clips them): clamp what they load.
  typename Epi::Row rows[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) rows[h] = epi.row(min(row_base + lane / 4 + 8 * h, args.m - 1));
  // Column terms: loaded coalesced one chunk ahead, shuffled to the fragment lanes (chunk_cols.cuh).
  constexpr int kChunks = Cfg::kWN / kCols;
  ChunkCols<Epi, kCols> cols[2];
  cols[0].load(epi, col_base, args.n, lane);
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk, ++chunks_issued) {
    const ChunkCols<Epi, kCols>& here = cols[chunk % 2];
    if (chunk + 1 < kChunks) cols[(chunk + 1) % 2].load(epi, col_base + (chunk + 1) * kCols, args.n, lane);
    const uint32_t buffer = staging_addr + (chunks_issued % 2) * Cfg::kEpiBufferBytes;
    if (lane == 0) ptx::bulk_wait_group_read<1>();
    __syncwarp();
#pragma unroll
    for (int jj = 0; jj < kCols / 8; ++jj) {
      const int j = chunk * (kCols / 8) + jj;
      typename Epi::Col c0, c1;
      here.fragment_pair(jj, lane, c0, c1);
      const int byte_in_row = (8 * jj + 2 * (lane % 4)) * static_cast<int>(sizeof(Out));
      const int swizzled = (((byte_in_row >> 4) ^ xor_chunk) << 4) | (byte_in_row & 15);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = lane / 4 + 8 * h;
        store_pair_shared<Out>(buffer + r * Cfg::kEpiRowBytes + swizzled, epi.apply(acc[4 * j + 2 * h], rows[h], c0),
                               epi.apply(acc[4 * j + 2 * h + 1], rows[h], c1));
      }
    }
    if constexpr (kInt32) {
      if (finish) {
        __syncwarp();
        const int r = lane / 2;
        const int row = row_base + r;
#pragma unroll 1
        for (int i = 0; i < 4; ++i) {
          const int c16 = 4 * (lane % 2) + i;  // 16-byte chunk of the row: columns 4*c16 .. 4*c16 + 3
          const uint32_t addr = buffer + r * Cfg::kEpiRowBytes + ((c16 ^ (r % 8)) << 4);
          int4 v = ptx::ld_shared_v4(addr);
          const int col = col_base + chunk * kCols + 4 * c16;
          if (row < args.m) {
            if (col < args.n) v.x = epi.finish(v.x, row, col);
            if (col + 1 < args.n) v.y = epi.finish(v.y, row, col + 1);
            if (col + 2 < args.n) v.z = epi.finish(v.z, row, col + 2);
            if (col + 3 < args.n) v.w = epi.finish(v.w, row, col + 3);
          }
          ptx::st_shared_v4(addr, v);
        }
      }
    }
    ptx::fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) {
      // D is written once and read by no later tile: keep L2 for A and B.
      const uint64_t policy = ptx::l2_policy_evict_first();
      const void* src = staging + (buffer - staging_addr);
      if (split) {
        ptx::tma_reduce_add_2d(map_d, src, col_base + chunk * kCols, row_base, policy);
      } else {
        ptx::tma_store_2d(map_d, src, col_base + chunk * kCols, row_base, policy);
      }
      ptx::bulk_commit_group();
    }
  }
}

template <class Cfg, bool ASigned, bool BSigned, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    sm90_int8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          const __grid_constant__ CUtensorMap map_d, const Sm90Args args, const Epi epi) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mma = ptx::WgmmaInt8<Cfg::kWN, ASigned, BSigned>;
  constexpr int kStages = Cfg::kStages;
  constexpr bool kPerBlock = Epi::kPerBlock;
  static_assert(!kPerBlock || (Cfg::kSupportsPerBlock && !Cfg::kPingPong), "config cannot promote per-block scales");

  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(round_up<uintptr_t>(reinterpret_cast<uintptr_t>(smem_raw), 1024));
  uint8_t* a_tiles = smem;                                   // kStages x [BM][128], swizzled
  uint8_t* b_tiles = smem + kStages * Cfg::kATileBytes;      // kStages x [BN][128], swizzled
  uint8_t* epi_buffers = b_tiles + kStages * Cfg::kBTileBytes;  // per consumer warp: 2 x [16][128 bytes]
  uint64_t* full = reinterpret_cast<uint64_t*>(epi_buffers + Cfg::kEpiBytes);
  uint64_t* empty = full + kStages;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);                                 // the producer's expect_tx
      ptx::mbarrier_init(&empty[s], Cfg::kSlotReaders);                // one arrival per reading warp
    }
    ptx::mbarrier_fence_init();
    ptx::tma_prefetch_descriptor(&map_a);
    ptx::tma_prefetch_descriptor(&map_b);
    if (args.d_tma) ptx::tma_prefetch_descriptor(&map_d);
  }
  // A shorter than one tile: each stage loads only its first a_box_rows rows (a box mostly out of
  // bounds costs ~10% at 17-33 rows against 8192 x 8192, benchmarks/NOTES-sm90.md step 14), so
  // the rows below stay zero for the whole run. Whole 128-byte rows: the swizzle keeps rows apart.
  if (args.a_box_rows < Cfg::kBM) {
    constexpr int kChunksPerRow = Cfg::kBK / 16;
    const int chunks = (Cfg::kBM - args.a_box_rows) * kChunksPerRow;
    for (int i = threadIdx.x; i < kStages * chunks; i += blockDim.x) {
      const int stage = i / chunks, rest = i % chunks;
      *reinterpret_cast<uint4*>(a_tiles + stage * Cfg::kATileBytes + args.a_box_rows * Cfg::kBK + 16 * rest) =
          make_uint4(0, 0, 0, 0);
    }
    ptx::fence_proxy_async_shared();  // before wgmma reads them
  }
  __syncthreads();

  const int units = args.tiles_m * args.tiles_n * args.split_k;

  if (warpgroup == 0) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    if (threadIdx.x != 0) return;
    int slot = 0;
    uint32_t phase = 0;
    // An operand box that other tiles read again (A along its tile row, B along its tile
    // column) stays in L2 (evict_last); one read by a single tile (B when M fits one tile row)
    // is streamed (evict_first). Measured: 64x8192x8192 381 -> 404 TOPS, 16x28672x8192 +5%.
    // (An explicit evict_normal policy made skinny problems 2-3x slower: benchmarks/NOTES-sm90.md.)
    const uint64_t keep = ptx::l2_policy_evict_last(), stream = ptx::l2_policy_evict_first();
    const uint64_t policy_a = args.tiles_n == 1 ? stream : keep;
    const uint64_t policy_b = args.tiles_m == 1 ? stream : keep;
    const uint32_t stage_bytes = args.a_box_rows * Cfg::kBK + Cfg::kBTileBytes;  // TMA counts a box whole
    for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const WorkUnit w = work_unit<Cfg::kGroupM>(args, unit);
      for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
        ptx::mbarrier_wait(&empty[slot], phase ^ 1);
        ptx::mbarrier_arrive_expect_tx(&full[slot], stage_bytes);
        ptx::tma_load_2d(a_tiles + slot * Cfg::kATileBytes, &map_a, &full[slot], kb * Cfg::kBK, w.tile_m * Cfg::kBM, policy_a);
        ptx::tma_load_2d(b_tiles + slot * Cfg::kBTileBytes, &map_b, &full[slot], kb * Cfg::kBK, w.tile_n * Cfg::kBN, policy_b);
        if (++slot == kStages) {
          slot = 0;
          phase ^= 1;
        }
      }
    }
  } else {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const int wg_m = Cfg::kPingPong ? 0 : consumer / Cfg::kWgN;
    const int wg_n = Cfg::kPingPong ? 0 : consumer % Cfg::kWgN;
    const int warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32;
    const uint64_t desc_a0 = ptx::wgmma_desc_k_major_sw128(a_tiles + wg_m * Cfg::kWgRows * Cfg::kBK);
    const uint64_t desc_b0 = ptx::wgmma_desc_k_major_sw128(b_tiles + wg_n * Cfg::kWN * Cfg::kBK);

    // Int32 sums over the whole K range. With per-block scales, two int32 sets (acc, acc_next)
    // hold one K block each, in turn, and fp32 accumulators the promoted sum.
    int32_t acc[Cfg::kMmaM][Cfg::kAccRegs];
    int32_t acc_next[kPerBlock ? Cfg::kMmaM : 1][kPerBlock ? Cfg::kAccRegs : 1];
    float accf[kPerBlock ? Cfg::kMmaM : 1][kPerBlock ? Cfg::kAccRegs : 1];

    // Issues the wgmma of one K block (ring slot) into a set of accumulators.
    auto issue_block = [&](int32_t(&into)[Cfg::kMmaM][Cfg::kAccRegs], int slot, bool accumulate) {
      ptx::wgmma_fence();
      const uint64_t desc_a = ptx::wgmma_desc_advance(desc_a0, slot * Cfg::kATileBytes);
      const uint64_t desc_b = ptx::wgmma_desc_advance(desc_b0, slot * Cfg::kBTileBytes);
#pragma unroll
      for (int kk = 0; kk < Cfg::kBK / Cfg::kMmaK; ++kk) {
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
          Mma::mma(ptx::wgmma_desc_advance(desc_a, mi * 64 * Cfg::kBK + kk * Cfg::kMmaK),
                   ptx::wgmma_desc_advance(desc_b, kk * Cfg::kMmaK), into[mi], accumulate || kk > 0);
        }
      }
      ptx::wgmma_commit_group();
    };

    const int my_units = (units - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                         static_cast<int>(gridDim.x);
    auto unit_of = [&](int nth) {
      return work_unit<Cfg::kGroupM>(args, static_cast<int>(blockIdx.x) + nth * static_cast<int>(gridDim.x));
    };
    uint32_t ring = 0;  // K blocks handed out by the ring so far (slot = ring % kStages)
    uint32_t chunks_issued = 0;  // this warp's epilogue TMA stores so far (staging buffer = count % 2)

    // The epilogue of this warpgroup's piece of tile w (its columns start at col_base).
    auto store_tile = [&](const WorkUnit& w, int col_base, const typename Epi::Acc (&pieces)[Cfg::kMmaM][Cfg::kAccRegs]) {
#pragma unroll
      for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
        const int row_base = w.tile_m * Cfg::kBM + wg_m * Cfg::kWgRows + 64 * mi;
        if (row_base >= args.m || col_base >= args.n) continue;  // this piece lies outside D
        if (args.d_tma) {
          if (row_base + 16 * warp < args.m) {
            uint8_t* staging = epi_buffers + (consumer * 4 + warp) * 2 * Cfg::kEpiBufferBytes;
            store_warp_tile<Cfg>(args, epi, &map_d, pieces[mi], staging, row_base + 16 * warp, col_base, lane,
                                 chunks_issued);
          }
        } else {
          store_fragment<Cfg::kWN>(args, epi, pieces[mi], row_base + warp * 16 + lane / 4, col_base + 2 * (lane % 4));
        }
      }
    };

    if constexpr (!kPerBlock) {
      // Ping-pong turns: warpgroup c waits on named barrier 1 + c before its main loop, and the
      // other warpgroup arrives there when its own main loop has issued. Besides keeping the two
      // main loops apart, this keeps a warpgroup from waiting on a ring slot two phases ahead of
      // the barrier (the other warpgroup has waited on every K block before this tile's).
      // Units never have an empty K range (the launcher makes every split non-empty).
      for (int nth = 0; nth < my_units; ++nth) {
        const WorkUnit w = unit_of(nth);
        if (Cfg::kPingPong && nth % 2 != consumer) {
          ring += w.kb_end - w.kb_begin;  // the other warpgroup's tile
          continue;
        }
        if (Cfg::kPingPong && nth > 0) ptx::named_barrier_sync(1 + consumer, 256);
        const int col_base = w.tile_n * Cfg::kBN + wg_n * Cfg::kWN;
        int prev_slot = -1;
        for (int kb = w.kb_begin; kb < w.kb_end; ++kb, ++ring) {
          const int slot = static_cast<int>(ring % kStages);
          ptx::mbarrier_wait(&full[slot], (ring / kStages) & 1);
          issue_block(acc, slot, kb > w.kb_begin);
          // The group of the previous K block has retired: its slot can be refilled.
          ptx::wgmma_wait_group<1>(acc);
          if (prev_slot >= 0 && lane == 0) ptx::mbarrier_arrive(&empty[prev_slot]);
          prev_slot = slot;
        }
        if (Cfg::kPingPong && nth + 1 < my_units) ptx::named_barrier_arrive(1 + (1 - consumer), 256);
        ptx::wgmma_wait_group<0>(acc);
        if (lane == 0) ptx::mbarrier_arrive(&empty[prev_slot]);
        store_tile(w, col_base, acc);
      }
    } else {
      // Per-block scales (no split-K): each K block's int32 partial sums are folded into the fp32
      // accumulators accf with that block's factors sa(row, kb) * sb(col, kb) (promotion). Every
      // K block starts its wgmma from zero, so the CTA's K blocks, tile after tile, go into the
      // two int32 sets in turn: a step issues the block after the current one into the other set
      // and promotes the current one while those wgmma run, and a tile's epilogue runs while the
      // next tile's first block does. ptxas serializes every wgmma of the kernel when a wgmma or
      // wait sits under a condition (C7518: the only branches here are the loop's exits), when
      // the current set is read between issuing the next block and a wait_group 1 (C7514: hence
      // wait_group 0 before the issue) or when the loop writes to accumulator registers (C7515).
      // Measured (benchmarks/NOTES-scaled.md step 12): +18-22% against one set.
      const int k_blocks = args.k_blocks;
      const int total = my_units * k_blocks;  // K blocks of this CTA
      const int64_t sa_stride = epi.p.sa_stride_kb, sb_stride = epi.p.sb_stride_kb;
      const bool b_blocks = sb_stride != 0;  // else sb is per channel and waits for the epilogue's col()
      // Raw scales are loaded two K blocks ahead and multiplied one ahead, so that no product
      // waits on a load of the same step. A thread's scales lie at a base plus kb * stride.
      struct RawScales {
        float a[Cfg::kMmaM][2];
        float b;
      };
      const float* sa_base[Cfg::kMmaM][2];
      const float* sb_base;
      auto load_scales = [&](RawScales& raw, int kb) {
        raw.b = b_blocks ? sb_base[kb * sb_stride] : 1.0f;
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) raw.a[mi][h] = sa_base[mi][h][kb * sa_stride];
      };
      float scale[Cfg::kMmaM][2];  // the current block's factors (rows + 0 and + 8 of each m64 piece)
      auto combine = [&](const RawScales& raw) {
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) scale[mi][h] = raw.a[mi][h] * raw.b;
      };
      RawScales raw_next, raw_new;  // the scales of K blocks kb + 1 and kb + 2
      WorkUnit w;
      int col_base;  // this warpgroup's first column of tile w
      auto begin_tile = [&](int nth) {
        w = unit_of(nth);
        col_base = w.tile_n * Cfg::kBN + wg_n * Cfg::kWN;
        const int row0 = w.tile_m * Cfg::kBM + wg_m * Cfg::kWgRows + 16 * warp + lane / 4;  // + 64 mi + 8 h
        sb_base = epi.sb_ptr(min(col_base, args.n - 1));
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) sa_base[mi][h] = epi.sa_ptr(min(row0 + 64 * mi + 8 * h, args.m - 1));
        load_scales(raw_new, 0);
        load_scales(raw_next, min(1, k_blocks - 1));
        combine(raw_new);
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int i = 0; i < Cfg::kAccRegs; ++i) accf[mi][i] = 0.0f;
      };
      auto promote_block = [&](const int32_t(&cur)[Cfg::kMmaM][Cfg::kAccRegs]) {
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int i = 0; i < Cfg::kAccRegs; ++i)
            accf[mi][i] = promote(accf[mi][i], cur[mi][i], scale[mi][(i / 2) % 2]);
      };
      int nth = 0, kb = 0;  // the current block's unit and K block
      // Block (nth, kb) was issued into `cur` and is not the CTA's last.
      auto step = [&](int32_t(&cur)[Cfg::kMmaM][Cfg::kAccRegs], int32_t(&next)[Cfg::kMmaM][Cfg::kAccRegs]) {
        load_scales(raw_new, min(kb + 2, k_blocks - 1));
        const int slot = static_cast<int>(ring % kStages);
        ++ring;
        const int next_slot = static_cast<int>(ring % kStages);
        ptx::mbarrier_wait(&full[next_slot], (ring / kStages) & 1);
        ptx::wgmma_wait_group<0>(cur);
        issue_block(next, next_slot, false);
        if (lane == 0) ptx::mbarrier_arrive(&empty[slot]);
        promote_block(cur);
        combine(raw_next);
        raw_next = raw_new;
        if (++kb == k_blocks) {
          store_tile(w, col_base, accf);
          kb = 0;
          begin_tile(++nth);
        }
      };
      begin_tile(0);
      {
        const int slot = static_cast<int>(ring % kStages);
        ptx::mbarrier_wait(&full[slot], (ring / kStages) & 1);
        issue_block(acc, slot, false);
      }
      // Block g of the CTA's sequence is in acc for even g, in acc_next for odd g.
      for (int g = 0; g + 1 < total; g += 2) {
        step(acc, acc_next);
        if (g + 2 == total) break;
        step(acc_next, acc);
      }
      ptx::wgmma_wait_group<0>(acc);
      ptx::wgmma_wait_group<0>(acc_next);
      if (lane == 0) ptx::mbarrier_arrive(&empty[ring % kStages]);
      ++ring;
      if (total % 2 == 0) {  // the last block, total - 1, is odd
#pragma unroll
        for (int mi = 0; mi < Cfg::kMmaM; ++mi)
#pragma unroll
          for (int i = 0; i < Cfg::kAccRegs; ++i) acc[mi][i] = acc_next[mi][i];
      }
      promote_block(acc);
      store_tile(w, col_base, accf);
    }
    // The shared-memory sources of the last stores must stay valid until TMA has read them.
    if (args.d_tma && lane == 0) ptx::bulk_wait_group<0>();
  }
#endif
}

// The launch shared by every epilogue: tensor maps, grid, signedness.
template <class Cfg, class Epi>
void launch_sm90(const GemmParams& p, const Epi& epi, void* d, OutType out_type, int sm_count) {
  using Out = typename Epi::OutT;
  Sm90Args args{};
  args.m = p.m;
  args.n = p.n;
  args.k_blocks = ceil_div(p.k, Cfg::kBK);
  args.split_k = std::max(1, std::min(p.split_k, args.k_blocks));
  args.k_blocks_split = ceil_div(args.k_blocks, args.split_k);
  args.split_k = ceil_div(args.k_blocks, args.k_blocks_split);  // no empty split
  if (Epi::kPerBlock && args.split_k != 1) throw std::logic_error("tcgemm: the sm90 per-block kernel has no split-K");
  args.tiles_m = ceil_div(p.m, Cfg::kBM);
  args.tiles_n = ceil_div(p.n, Cfg::kBN);
  args.a_box_rows = std::min(Cfg::kBM, round_up(p.m, 8));
  args.d = d;
  args.ldd = p.ldd;
  args.d_vec2 = p.ldd % 2 == 0 && reinterpret_cast<uintptr_t>(d) % (2 * sizeof(Out)) == 0;
  args.d_tma = tma_storable(d, sizeof(Out), p.m, p.ldd);

  const CUtensorMap map_a = make_operand_tensor_map(p.a, p.m, p.k, args.a_box_rows, "a");
  const CUtensorMap map_b = make_operand_tensor_map(p.b, p.n, p.k, Cfg::kBN, "b");
  CUtensorMap map_d{};
  if (args.d_tma) {
    map_d = make_output_tensor_map(d, out_type, p.m, p.n, p.ldd, Cfg::kEpiRows,
                                   Cfg::kEpiRowBytes / static_cast<int>(sizeof(Out)));
  }

  auto kernel = sm90_int8_gemm_kernel<Cfg, true, true, Epi>;
  if constexpr (std::is_same_v<Epi, Int32Epilogue>) {  // the scaled GEMM takes int8 x int8 only
    if (p.a.is_signed && !p.b.is_signed) kernel = sm90_int8_gemm_kernel<Cfg, true, false, Epi>;
    if (!p.a.is_signed && p.b.is_signed) kernel = sm90_int8_gemm_kernel<Cfg, false, true, Epi>;
    if (!p.a.is_signed && !p.b.is_signed) kernel = sm90_int8_gemm_kernel<Cfg, false, false, Epi>;
  }
  TCGEMM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const int64_t units = static_cast<int64_t>(args.tiles_m) * args.tiles_n * args.split_k;
  const int grid = static_cast<int>(std::min<int64_t>(units, sm_count));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, p.stream>>>(map_a, map_b, map_d, args, epi);
  TCGEMM_CHECK_LAUNCH();
}

template <class Cfg>
void launch_sm90_int8_gemm(const GemmParams& p, int sm_count) {
  launch_sm90<Cfg>(p, Int32Epilogue{p.epilogue}, p.d, OutType::kInt32, sm_count);
}

template <class Cfg, bool PerBlock>
void launch_sm90_scaled_gemm(const GemmParams& p, int sm_count) {
  switch (p.out_type) {
    case OutType::kBf16:
      return launch_sm90<Cfg>(p, ScaledEpilogue<__nv_bfloat16, PerBlock>{p.scaled}, p.out, p.out_type, sm_count);
    case OutType::kFp16:
      return launch_sm90<Cfg>(p, ScaledEpilogue<__half, PerBlock>{p.scaled}, p.out, p.out_type, sm_count);
    case OutType::kFp32:
      return launch_sm90<Cfg>(p, ScaledEpilogue<float, PerBlock>{p.scaled}, p.out, p.out_type, sm_count);
    case OutType::kInt32: break;
  }
  throw std::logic_error("tcgemm: launch_sm90_scaled_gemm needs a float output type");
}

}  // namespace tcgemm::sm90

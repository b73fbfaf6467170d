// The skinny kernel's tile configs: a block of 8 warps computes RowTiles m16 tiles of rows by
// ColTiles n8 tiles of columns of D; dispatch/plan.cpp chooses among them (docs/design/skinny.md).
#pragma once

#include <cstdint>

#include "common/hd.h"
#include "common/scale_layout.h"

namespace tcgemm::skinny {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
// Blocks resident per SM (__launch_bounds__): 128 registers per thread.
constexpr int kBlocksPerSm = 2;
constexpr int kBK = 128;  // bytes of K per K block
// Shared memory per warp for its ring of packed 4-bit B (skinny_gemm.cuh Int4Ring): 3 K blocks of
// 32 columns (2 in flight while one is computed), 6 of 16; 48 KB per block. Deeper rings measured
// slower: 32 columns, H200 bench_decode M = 1, 8B gate+up 22.7 us at 6 KB, 23.4 at 8 KB, 24.1 at
// 10 KB; 16 columns, H100, 30.8 us at 6 KB, 32.6 at 10 KB; with the weight as the mma's A
// operand (H100 A/B, M = 1), 8 KB: 8B qkv 7.0 -> 8.0 us, 70B o 14.5 -> 15.5, every layer 2-13%
// slower. The loop is bound by its instructions, not by bytes in flight.
constexpr int kInt4RingBytesPerWarp = 6 * 1024;
static_assert(kBK == kScaleBlock, "a K block must be one scale block");
// tcgemm.quant_linear lets the kernel quantize the activations itself (skinny_quantize.cuh) at up
// to kQuantizeRows rows of x whose 16-byte vectors give each thread at most kQuantizeVecs: every
// block quantizes all of x from registers (up to 8192 bf16/fp16 or 4096 fp32 values), but for
// one row in parts (XShare, below).
constexpr int kQuantizeRows = 4;
constexpr int kQuantizeVecs = 4;

// The part of x's one row that a block quantizes when x is one token and the blocks of a cluster
// split each tile's K (WarpWork: rank r's warps read the K blocks kb with kb / kWarps = r modulo
// the split), where the whole row takes more than kQuantizeVecs vectors per thread: chunks of
// kWarps K blocks, the cluster's ranks in turn. The block's j-th vector (vec values each) is x's
// vector vector(j); the row's amax is the max of the ranks' amaxes. So a row of up to 16384
// bf16 / fp16 values takes one kernel at a split of 2 instead of a quantize kernel and the GEMM
// (8B down, K = 14336: 1.06x on an H200, 1.07x on an H100, bench_decode M = 1). A row that fits
// one block is quantized whole by each (split 1, rank 0 here): quantized in parts there, 8B k / v
// (K = 4096, 32 tiles) ran 0.95x.
struct XShare {
  static constexpr int kMostSplit = 8;  // the portable cluster size
  int rank = 0, split = 1;
  // The share of the block of rank `rank` among `split` for a row of nvec vectors.
  TCGEMM_HD static XShare of(int rank, int split, int64_t nvec) {
    return nvec <= int64_t{kQuantizeVecs} * kThreads ? XShare{} : XShare{rank, split};
  }
  // x's vectors per chunk.
  TCGEMM_HD static int chunk(int vec) { return kWarps * kBK / vec; }
  TCGEMM_HD int vector(int j, int vec) const {
    const int c = chunk(vec);
    return (j / c * split + rank) * c + j % c;
  }
  // The most vectors of a row of nvec that a block of `split` quantizes.
  TCGEMM_HD static int64_t most(int64_t nvec, int vec, int split) {
    const int64_t c = chunk(vec), chunks = (nvec + c - 1) / c, parts = of(0, split, nvec).split;
    return parts == 1 ? nvec : (chunks + parts - 1) / parts * c;
  }
};

template <int RowTiles, int ColTiles>
struct TileConfig {
  static constexpr int kRowTiles = RowTiles, kColTiles = ColTiles;
  static constexpr int kRows = 16 * RowTiles, kCols = 8 * ColTiles;
  // K blocks of B a warp keeps in flight: as many as 128 registers per thread allow (two blocks
  // per SM): 64 registers of B with one m16 tile of A, 32 with two (whose A fragments take the rest).
  static constexpr int kDepth = (RowTiles == 1 ? 64 : 32) / (8 * ColTiles);
  static_assert(kDepth >= 1, "no register room for a K block of B");
};

// Up to 16 rows, 16 columns per block: the most blocks, for narrow B and M <= 8.
using Rows16Cols16 = TileConfig<1, 2>;
// Up to 16 rows, 32 columns: at 9-16 rows on wide B, each K block of A a warp loads feeds twice
// as many mma (H200: 16x8192x8192 87.4 -> 89.1-90.0 TOPS; at M = 1 and 4 it lost up to 10%).
using Rows16Cols32 = TileConfig<1, 4>;
// 17-32 rows (reached only through the forced skinny backend).
using Rows32Cols16 = TileConfig<2, 2>;

// The config of packed 4-bit B at up to 16 rows (dispatch/plan.cpp), x quantized in the kernel or
// not: each K block a warp waits for in its ring, loads and re-pairs A for and reads group scales
// for then feeds the mma of 32 columns, and a block's per-tile work (finding the tile, the sums'
// reduction) covers twice the columns. H200, bench_decode M = 1 against 16 columns: 8B qkv 11.1 ->
// 8.6 us, 8B gate+up 26.8 -> 22.7 us, 70B down 55.7 -> 42.1 us; M = 16 as fast or faster
// (docs/design/int4.md).
using Int4Rows16 = Rows16Cols32;
// The config of the kernels that quantize x themselves against int8 B.
using QuantizingInt8 = Rows16Cols16;

}  // namespace tcgemm::skinny

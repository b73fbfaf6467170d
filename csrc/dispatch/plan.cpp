#include "dispatch/plan.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>

#include "epilogue/epilogues.h"
#include "kernels/skinny/configs.h"
#include "kernels/sm80/configs.h"
#include "kernels/sm90/configs.h"

namespace tcgemm {
static_assert(kW4Splits[2] <= sm90::kW4MaxSplit, "the W4 epilogue adds the sums of at most kW4MaxSplit blocks");

// Taken when the skinny kernel's 16-column blocks give every SM at least one, K is long enough
// that B dominates, and M <= 8, or M <= 16 with N <= 8192 against the sm80 kernels (wider B
// gives the tiles enough columns to stream as well), N <= 6144 against the sm90 kernels.
// H200, int8_gemm TOPS against the sm90 kernels (docs/design/skinny.md, "Against the tiled
// kernels" and "The route"): M = 1 and 4 1.06-1.3x at N <= 8192, 0.97-1.02x at N = 14336/28672;
// M = 8 at N = 8192 1.02x; M = 16 at N = 4096 1.19x, but at N = 8192 0.95-0.98x (sm90 89.5-92.0,
// skinny 87.3-87.7, cuBLASLt 88.4-88.9) and M = 12 0.98-0.99x: the 9-16 row bound sits between
// the two measured widths.
// A packed 4-bit B (b_int4) takes the skinny kernel at every M <= 16: the other kernels would
// compute with its unpacked int8 weight, and unpacking moves 1.5 bytes a weight before the GEMM
// streams one (H100, bench_decode M = 16, N >= 8192: 0.74-0.83x bf16 that way). Against the sm90
// kernels also at 17-32 rows, and at 33-64 where the 64x128 tiles do not fill the SMs
// (use_skinny_int4).
bool use_skinny(int m, int n, int k, int sm_count, bool vs_sm90, bool b_int4) {
  if (b_int4) return m <= 16 || (vs_sm90 && use_skinny_int4(m, n, sm_count));
  const bool few_rows = m <= 8 || (m <= 16 && n <= (vs_sm90 ? 6144 : 8192));
  return few_rows && (n + 15) / 16 >= sm_count && k >= 512;
}

// H200, one row, W8A8 layer (bench_decode's Llama layers): the GEMV after x's own quantization
// against the skinny kernel quantizing x itself took 0.87-0.93x the time from 25 MB of weight up
// (8B qkv, 8B down, 8B gate+up, 70B qkv and down), 1.00x at 70B o and 1.04x at 8B o (17 MB),
// where the extra launch outweighs the faster stream (docs/design/gemv.md).
constexpr int64_t kGemvMinWeightBytes = int64_t{20} << 20;

bool use_gemv(int m, int n, int k, bool b_int4) {
  return m == 1 && !b_int4 && int64_t{n} * k >= kGemvMinWeightBytes;
}

// A forced skinny backend takes any M. At 9-16 rows, 32 columns per block when that still gives
// every SM its two block slots (N >= ~7.9K on 132 SMs): each K block of A a warp loads then feeds
// twice as many mma (docs/design/skinny.md, "32-column blocks at 9-16 rows"). A packed 4-bit B
// takes 32 columns at every M <= 16 (skinny::Int4Rows16, configs.h).
SkinnyConfig plan_skinny(int m, int n, int sm_count, bool b_int4) {
  if (m > 16) return SkinnyConfig::kRows32Cols16;
  if (b_int4) return SkinnyConfig::kRows16Cols32;
  const long long wide_blocks = (n + 31) / 32;
  return m > 8 && 8 * wide_blocks >= 15LL * sm_count ? SkinnyConfig::kRows16Cols32 : SkinnyConfig::kRows16Cols16;
}

// The tiled sm90 kernel with a packed B unpacks every K block in shared memory (the consumer
// warpgroups, between wgmma: kernels/sm90/sm90_unpack.cuh), which costs it more than the
// separate unpacking pass costs the int8 kernels once the GEMM is bound by its MACs, and its tiles
// leave SMs idle where N is narrow. Its configs by rows: 64x128 (Int4Small) up to 64, 128x128
// (Int4Mid) up to 128, then 256x128 (Int4); each smaller config where the larger one's tiles do
// not fill 60% of the SMs. H200, 2026-11-29, W4A8 quant_linear with each config forced in turn
// against the few-rows kernel's 32-row tiles and the unpacking pass (CUDA graphs, weights rotated
// past L2, us; docs/design/int4.md): at 32 rows the few-rows kernel wins on all seven Llama-3
// layers (8B gate+up 41.6 against 45.8 for 64x128 tiles; 8B o 10.1 against 26.6); at 64 rows
// 64x128 tiles win on 8B gate+up (45.9 against 77.7) and 70B qkv (80 tiles: 44.3 against 51.7),
// the few-rows kernel on the layers of 64 tiles or fewer (70B o 41.4 against 44.0, 8B down 35.0
// against 64.8); at 128 rows 128x128 tiles on 8B gate+up (51.4 against 82.5 for 64x128 and 66.6
// for 256x128) and 70B qkv, 64x128 tiles on 70B o and down (45.6 against 49.5), the pass on 8B o
// and down (21.8 against 26.8); at 256 rows 256x128 tiles on 8B gate+up (68.4 against 93.3) and
// 70B qkv, 128x128 on 70B o and 8B qkv (30.5 against 35.4 for the pass); at 512 rows 256x128
// wherever they fill the SMs, 128x128 on 8B o and down (30.6 and 83.6 against 30.9 and 84.9).
namespace {
// Whether a packed 4-bit B's tiles of config Cfg give at least 60% of the SMs one: below that the
// few-rows kernel (K split between warps and blocks) or the unpacking pass and the int8 kernels
// (smaller tiles, split-K) beat them (H200, docs/design/int4.md).
template <class Cfg>
bool int4_tiles_fill(int m, int n, int sm_count) {
  const long long tiles = static_cast<long long>((m + Cfg::kBM - 1) / Cfg::kBM) * ((n + Cfg::kBN - 1) / Cfg::kBN);
  return 5 * tiles >= 3LL * sm_count;
}
}  // namespace

bool use_skinny_int4(int m, int n, int sm_count) {
  return m <= 32 || (m <= 64 && !int4_tiles_fill<sm90::Int4Small>(m, n, sm_count));
}

std::optional<Sm90Config> sm90_int4_config(int m, int n, int sm_count) {
  if (m > 512) return std::nullopt;
  if (m <= 64) {
    if (int4_tiles_fill<sm90::Int4Small>(m, n, sm_count)) return Sm90Config::kInt4Small;
    return std::nullopt;
  }
  if (m <= 128) {
    if (int4_tiles_fill<sm90::Int4Mid>(m, n, sm_count)) return Sm90Config::kInt4Mid;
    if (int4_tiles_fill<sm90::Int4Small>(m, n, sm_count)) return Sm90Config::kInt4Small;
    return std::nullopt;
  }
  if (int4_tiles_fill<sm90::Int4>(m, n, sm_count)) return Sm90Config::kInt4;
  if (int4_tiles_fill<sm90::Int4Mid>(m, n, sm_count)) return Sm90Config::kInt4Mid;
  return std::nullopt;
}

bool use_sm90_int4(int m, int n, int sm_count) { return sm90_int4_config(m, n, sm_count).has_value(); }

// The W4 kernel's tiles cover 128 weight rows by 32, 64, 128 or 256 rows of A (the fewest rows
// that hold M, tiles of 256 above); a K split where it shortens the waves of tiles enough to pay
// for the reduction (about two K blocks of time per tile), each share at least 4 K blocks, with
// the blocks that fit at once as the device reports them (clusters of 4 do not fill every SM).
namespace {

struct W4Choice {
  W4Plan plan;
  double cost = 0;  // waves x K blocks per block (+ 2 for a split's reduction)
  long long blocks = 0, kb_per_block = 0, waves = 0, slots = 0;  // slots: the blocks that run at once
};

// Where the W4 kernel beats the routes before it (the few-rows kernel, the tiled kernel's
// shared-memory unpacking, the unpacking pass). With int8 group scales (or none) and K of 4096 or
// more, everywhere at 33-512 rows: H200, 2026-11-30, the W4 kernel unchecked against the routes
// in one process (scripts/dev/knob_sweep, docs/design/int4.md: the W4 kernel's epilogue), us: 8B o
// (4096 -> 4096) 15.2 -> 12.5 at 64 rows, 22.6 -> 15.2 at 128, 24.3 -> 18.2 at 256; 8B gate+up
// 70.8 -> 55.1 at 256, 131.9 -> 108.5 at 384; 70B qkv 128.7 -> 77.8 at 512. At 17-32 rows the
// rule below holds still: unchecked, 8B o 10.0 -> 11.2 and 8B down 20.5 -> 23.9 (64 blocks),
// where 8B qkv 14.9 -> 12.5 (192 paired blocks of 8 K blocks). Elsewhere (shorter K, and fp32
// scales per K block), the rules measured before the epilogue's loads were batched (H200,
// 2026-11-29, A/B runs of bench_decode --decode-only --methods quantlinear,w4a8, W4A8 TOPS):
//   17-32 rows: wins where its blocks fill 90% of the SMs with 32 K blocks or more each (8B
//   gate+up 274 / 224, 70B qkv 184 / 166), loses elsewhere (8B qkv 95 / 109 with 192 blocks of 8
//   K blocks, 8B o 67 / 107, 8B down 140 / 176); and, measured after the epilogue's batching
//   (H200, 2026-11-30, plans forced, knob_sweep, 32 rows), also in clusters of 2 filling 70% of
//   the SMs with 16 K blocks a block: 8B qkv, 96 blocks, 10.9 us against the few-rows kernel's 14.4
//   (where 8B o's 64 blocks took 10.2 against 9.3, and 8B down's 64 of 56 K blocks 23.3 against 20.1);
//   33-64 rows: wins on every layer but 8B o (8B qkv 171 / 157, 8B down 250 / 213, 70B qkv 320 /
//   256, 8B gate+up 491 / 390; 8B o 120 / 142, 32 tiles of 32 K blocks);
//   65-128 rows: wins or ties with 16 K blocks or more per block (8B down 346 / 308, 8B gate+up
//   638 / 619, 70B qkv 402 / 401), loses on 8B o (172 / 196 with 8 K blocks a block);
//   above 128 rows: wins only on the long-K layers of at most 8192 columns (8B down 466 / 412 at
//   256 rows, 70B o 707 / 689, 70B down 1013 / 956; 8B gate+up 803 / 857, 70B qkv 540 / 643 lose).
// Whether it does at m x n x k with `blocks` blocks of `kb_per_block` K blocks each, in
// clusters of `split`; per_block: fp32 weight scales per K block.
constexpr int kW4LongKBlocks = 32;

bool w4_wins(int m, int n, int k, int sm_count, long long blocks, long long kb_per_block, int split, bool per_block) {
  const long long tiles = blocks / split, k_blocks = k / sm90::W4Rows64::kBK;
  if (!per_block && k_blocks >= kW4LongKBlocks && m > 32) return true;
  if (m <= 32)
    return (kb_per_block >= 32 && 10 * blocks >= 9LL * sm_count) ||
           (split == 2 && kb_per_block >= 16 && 10 * blocks >= 7LL * sm_count);
  if (m <= 128 && tiles * k_blocks < 8LL * sm_count) return false;  // one tile row: all the layer's K blocks
  if (m <= 64) return true;
  if (m <= 128) return kb_per_block >= 16;
  return k >= 8192 && n <= 8192;
}

// The cheapest plan of Cfg among the splits where the kernel wins; per_block: fp32 scales per K
// block, of which a block's shared memory holds fewer. Cost: waves x (K blocks per block, + 2 for
// a split's reduction, + wave_cost for what a wave of blocks costs besides its K blocks).
template <class Cfg>
std::optional<W4Choice> plan_w4_split(W4Config config, int m, int n, int k, int sm_count,
                                      const W4Residency& resident, bool per_block = false, bool checked = true,
                                      double wave_cost = 0.0) {
  W4Choice best;
  best.plan.config = config;
  best.cost = 1e300;
  const long long tiles = static_cast<long long>((m + Cfg::kRowsM - 1) / Cfg::kRowsM) * ((n + Cfg::kBN - 1) / Cfg::kBN);
  const long long k_blocks = k / Cfg::kBK;
  // A block holds the scales of at most kMaxScaleBlocks (fp32: kMaxFloatScaleBlocks) K blocks.
  const long long most = per_block ? Cfg::kMaxFloatScaleBlocks : Cfg::kMaxScaleBlocks;
  if (most <= 0) return std::nullopt;
  const long long fewest = (k_blocks + most - 1) / most;
  for (int i = 0; i < 3; ++i) {
    const int split = kW4Splits[i];
    if (split < fewest || (split > 1 && k_blocks / split < 4)) continue;
    const int known = resident.blocks[static_cast<int>(config)][i];
    const long long slots = known > 0 ? known : static_cast<long long>(sm_count) * Cfg::kBlocksPerSM;
    const long long waves = (tiles * split + slots - 1) / slots;
    const long long kb_per_block = (k_blocks + split - 1) / split;
    if (checked && !w4_wins(m, n, k, sm_count, tiles * split, kb_per_block, split, per_block)) continue;
    // Promoting fp32 scales at up to 32 rows, one block per SM: a last wave under 80% full loses to
    // the routes before it (H200, 2026-11-29, A/B of bench_decode --decode-only, W4A8 with group
    // scales at 17 / 32 rows: 70B qkv, 160 blocks in two waves of 132, 0.85x / 0.96x; 8B gate+up,
    // 224 blocks, 1.34x / 1.35x; 70B o and down, 128 blocks, 1.18x / 1.16x and 1.30x / 1.27x).
    if (per_block && m <= 32 && 5 * tiles * split < 4 * waves * slots) continue;
    const double cost =
        static_cast<double>(waves) * (static_cast<double>(kb_per_block) + (split > 1 ? 2.0 : 0.0) + wave_cost);
    if (cost < best.cost) {
      best.cost = cost;
      best.plan.split = split;
      best.blocks = tiles * split;
      best.kb_per_block = kb_per_block;
      best.waves = waves;
      best.slots = slots;
    }
  }
  if (best.blocks == 0) return std::nullopt;  // no split wins, or too many K blocks for the scales' shared memory
  return best;
}

// 33-512 rows: a wave of blocks costs about 12 K blocks besides its own (ring fill, group scales,
// epilogue): H200, 2026-11-30 (docs/design/int4.md: the W4 kernel's epilogue), us, 8B gate+up at
// 128 rows: two waves of W4Rows128 (32 K blocks a block) 37.6, five waves of W4Rows128Wg3 split 4
// (8 K blocks) 64.2; 70B qkv, one wave of W4Rows128Wg3: 27.3 with 32 K blocks a block, 40.6 with 64.
// At 33-64 rows (H200, 2026-11-30, plans forced, knob_sweep): 8B qkv, 48 tiles of 32 K blocks, 11.7
// us lone in clusters of 2 against 13.5 paired in clusters of 4 (the cheaper without the wave's
// cost); the other Llama layers' plans are the same with it or without.
constexpr double kW4WaveKBlocks = 12.0;

// Up to 64 rows: two blocks per SM where they run fewer waves by more than the time a block loses
// to sharing its SM. A paired block takes about 1.5x a lone one (H200, 2026-11-29, one A/B run, 8B
// gate+up at 64 rows, 224 tiles: two waves of lone blocks 38.5 us, one wave of pairs 30.6), and
// one alone on its SM, with half the ring, is slower than a lone block with all of it (70B o at
// 64 rows, 128 blocks: paired, split 2, 29.2 us for the kernel and the ordering pass in a sweep of
// splits; lone, the whole layer with its quantization, 27.0 in the bench of docs/performance.md).
constexpr double kW4PairedCost = 1.5;

template <class Lone, class Paired>
std::optional<W4Choice> plan_w4_lone_or_paired(W4Config lone, W4Config paired, int m, int n, int k, int sm_count,
                                               const W4Residency& resident, double wave_cost) {
  std::optional<W4Choice> a = plan_w4_split<Lone>(lone, m, n, k, sm_count, resident, false, true, wave_cost);
  std::optional<W4Choice> b = plan_w4_split<Paired>(paired, m, n, k, sm_count, resident, false, true, wave_cost);
  if (b && b->blocks > sm_count && (!a || kW4PairedCost * b->cost < a->cost)) return b;
  return a;
}

// Three consumer warpgroups (W4Rows128Wg3, tiles of 192 weight rows by 128 rows of x) where that
// plan costs less than `other`, the plan of W4Rows128 (up to 128 rows) or W4Rows256 (above) where
// the W4 kernel wins, with a K block of each config costing as measured against one of W4Rows128;
// where it does not win, if the wave fills three quarters of the SMs' slots. Below kW4LongKBlocks
// K blocks only in one wave of 16 K blocks a block or more. A block's K block costs about 900 +
// 5.5 x rows cycles with two consumer warpgroups (docs/design/int4.md), so W4Rows256's about 1.45
// times W4Rows128's; a third warpgroup makes it about 1.15 times as long for 1.5 times the weight
// rows. H200, 2026-11-30, us (knob_sweep, the plans unchecked, one process), the configs this
// picks against the other: 70B qkv 27.3 / 40.0 at 128 rows, 71.5 / 102.6 at 384; 8B down 25.4 /
// 30.6 at 96, 43.7 / 65.0 at 384; 8B o 18.2 / 20.6 at 256; 8B gate+up 108.5 / 139.1 at 384; and
// the other way 8B gate+up 37.6 / 64.2 at 128 rows, 70B o 50.1 / 72.3 at 512, 70B down 57.1 /
// 68.1 at 128 and 183.1 / 234.3 at 512; its misses: 8B o 14.9 / 14.4 at 96 rows, 16.2 / 15.2 at 128.
constexpr double kW4Wg3KBlockCost = 1.15;
constexpr double kW4Rows256KBlockCost = 1.45;

std::optional<W4Choice> plan_w4_wg3(int m, int n, int k, int sm_count, const W4Residency& resident,
                                    const std::optional<W4Choice>& other, double other_kblock_cost) {
  using Wg3 = sm90::W4Rows128Wg3;
  const std::optional<W4Choice> c = plan_w4_split<Wg3>(W4Config::kRows128Wg3, m, n, k, sm_count, resident, false,
                                                       /*checked=*/false, kW4WaveKBlocks);
  if (!c) return std::nullopt;
  const bool long_k = k / Wg3::kBK >= kW4LongKBlocks;
  if (!long_k && (c->waves != 1 || c->kb_per_block < 16)) return std::nullopt;
  if (other) return kW4Wg3KBlockCost * c->cost < other_kblock_cost * other->cost ? c : std::nullopt;
  return long_k || 4 * c->blocks >= 3 * c->slots ? c : std::nullopt;
}

}  // namespace

// The W4 kernel's plan: the cheapest of its configs and splits that wins (w4_wins), or none. With
// fp32 scales per K block (per_block), the configs that promote them: one block per SM, at most
// 64 rows (configs.h), under the same rules.
std::optional<W4Plan> plan_sm90_w4(int m, int n, int k, int sm_count, const W4Residency& resident, bool per_block) {
  if (m <= 16 || m > 512 || k % sm90::W4Rows64::kBK != 0) return std::nullopt;
  if (per_block) {
    static_assert(sm90::W4Rows32::kPromotes && sm90::W4Rows64::kPromotes, "the configs that promote");
    if (m > 64) return std::nullopt;
    const std::optional<W4Choice> c =
        m <= 32 ? plan_w4_split<sm90::W4Rows32>(W4Config::kRows32, m, n, k, sm_count, resident, true)
                : plan_w4_split<sm90::W4Rows64>(W4Config::kRows64, m, n, k, sm_count, resident, true);
    if (!c) return std::nullopt;
    return c->plan;
  }
  std::optional<W4Choice> c =
      m <= 32    ? plan_w4_lone_or_paired<sm90::W4Rows32, sm90::W4Rows32Paired>(
                       W4Config::kRows32, W4Config::kRows32Paired, m, n, k, sm_count, resident, 0.0)
      : m <= 64  ? plan_w4_lone_or_paired<sm90::W4Rows64, sm90::W4Rows64Paired>(
                       W4Config::kRows64, W4Config::kRows64Paired, m, n, k, sm_count, resident, kW4WaveKBlocks)
      : m <= 128 ? plan_w4_split<sm90::W4Rows128>(W4Config::kRows128, m, n, k, sm_count, resident, false, true,
                                                  kW4WaveKBlocks)
                 : plan_w4_split<sm90::W4Rows256>(W4Config::kRows256, m, n, k, sm_count, resident, false, true,
                                                  kW4WaveKBlocks);
  if (m > 64) {
    const std::optional<W4Choice> wg3 =
        plan_w4_wg3(m, n, k, sm_count, resident, c, m <= 128 ? 1.0 : kW4Rows256KBlockCost);
    if (wg3) c = wg3;
  }
  if (!c) return std::nullopt;
  return c->plan;
}

// Two blocks per tile where the tiles alone leave every SM's second block slot idle (at most one
// tile per SM) and K gives each of the cluster's 16 warps a K block; else whole tiles. H200,
// 2026-11-26, the splits interleaved in one run, M = 1, us at split 1 / 2 / 4 (docs/design/int4.md):
// 8B o (128 tiles) 7.2 / 6.7 / 11.8, 8B down (128) 16.2 / 14.7 / 20.7, 8B k and v (32) 5.9 / 5.3 /
// 5.4; but 8B qkv (192) 8.1 / 9.6 / 16.8, 70B o (256) 13.6 / 14.6 / 25.6, 8B gate+up (896) 21.8 /
// 26.6 / 64.5: a split tile costs each block a cluster barrier and a reduction through
// distributed shared memory, and the blocks of a cluster wait for each other. Again with the
// relaxed last barrier (H100, A/B, speed against this rule): a split up to two tiles per SM, 8B
// qkv 0.71x, 70B o 0.93x at M = 1; a split of 4 for 8B k / v, 0.91x.
int plan_skinny_int4_split(int m, int n, int k, int sm_count) {
  using Cfg = skinny::Int4Rows16;
  const long long tiles = static_cast<long long>((m + Cfg::kRows - 1) / Cfg::kRows) * ((n + Cfg::kCols - 1) / Cfg::kCols);
  const long long k_blocks = (k + skinny::kBK - 1) / skinny::kBK;
  return tiles <= sm_count && k_blocks >= 2 * skinny::kWarps ? 2 : 1;
}

Sm80Plan plan_sm80(int m, int n, int k, unsigned epilogue_family, int sm_count, int smem_optin) {
  using sm80::Large;
  using sm80::Small;
  const long long large_tiles =
      static_cast<long long>((m + Large::kBM - 1) / Large::kBM) * ((n + Large::kBN - 1) / Large::kBN);
  // One 128x128 block on each of half the SMs still beats four times as many 64x64 blocks
  // (H200: 512x4096x4096 and 256x8192x28672, 128 blocks on 132 SMs; docs/design/sm80.md).
  const bool large = smem_optin >= Large::kSmemBytes && 2 * large_tiles >= sm_count;
  if (epilogue_family == kEpiPerBlock) return Sm80Plan{large ? Sm80Config::kBlock : Sm80Config::kSmall, 1};
  if (large) return Sm80Plan{Sm80Config::kLarge, 1};
  if (epilogue_family != kEpiInt32) return Sm80Plan{Sm80Config::kSmall, 1};  // rounded once: no split-K
  // Split-K when the tiles alone leave more than half the SMs idle (tiny M, or tiny M and N):
  // enough K splits for about two blocks per SM, each keeping at least 4 K slices so its
  // pipeline fills. Measured on the H200: 1x4096x4096 1.9 -> 2.5 TOPS, 16x4096x4096 32 -> 41;
  // at 128-512 rows (about one wave of tiles) splitting lost 20-30% to the atomics and the fill.
  const long long tiles = static_cast<long long>((m + Small::kBM - 1) / Small::kBM) * ((n + Small::kBN - 1) / Small::kBN);
  if (2 * tiles > sm_count) return Sm80Plan{Sm80Config::kSmall, 1};
  const long long wanted = (2LL * sm_count + tiles - 1) / tiles;
  const long long most = ((k + Small::kBK - 1) / Small::kBK) / 4;
  return Sm80Plan{Sm80Config::kSmall, static_cast<int>(std::max(1LL, std::min({wanted, most, 16LL})))};
}

// The sm90 plan: tile and K split by a cost model in units of one 128x128x128 MAC block on one SM:
//   waves(units) x per-unit cost, per-unit cost = tile area x K blocks per split x the config's
//   relative cost per MAC, plus ~32 K blocks for a split's prefill kernel and TMA reduce-adds.
// The per-MAC factors stand for what waves miss: small tiles issue narrower wgmma and, on
// skinny problems, the run is bound by streaming B, which fewer, larger tiles do as well.
// Fitted to H200 runs (docs/design/sm90.md, "Tile configs and the plan"), e.g. TOPS at
//   128x8192x8192: 64x128 unsplit 702, 64x64 654, 128x128 615, 64x128 split 2 515;
//   256x8192x8192: 128x128 1000, 64x128 882, 128x256 split 2 684;
//   64x8192x8192: 64x64 unsplit 377, 64x128 unsplit 366, either split 2 ~310;
//   16x28672x8192: 64x128 116, 64x64 87.
// Ping-pong 128x128 beats cooperative 128x256 by 2-6% when K <= 4096 (short main loops, the
// epilogue exposed) and loses 2-7% at K >= 8192.
// Splits are tried only for epilogues that add partials, while the tiles alone leave more than
// half the SMs idle; the scaled GEMM's outputs are rounded once, after the whole K sum.
namespace {

constexpr double kSm90SplitPenaltyBlocks = 32.0;

// Tries every split of one config (while allowed) and keeps the cheapest plan so far.
// split_sms: splits are tried while 2 * tiles <= split_sms (0: never split).
template <class Cfg>
void sm90_consider(Sm90Config config, double per_mac, int m, int n, int k, int split_sms, Sm90Plan* best,
                   double* best_cost, int sm_count) {
  const long long tiles = static_cast<long long>((m + Cfg::kBM - 1) / Cfg::kBM) * ((n + Cfg::kBN - 1) / Cfg::kBN);
  const long long k_blocks = (static_cast<long long>(k) + Cfg::kBK - 1) / Cfg::kBK;
  const double area = static_cast<double>(Cfg::kBM) * Cfg::kBN / (128.0 * 128.0);
  for (int split = 1; split <= 16; ++split) {
    if (split > 1 && (2 * tiles > split_sms || k_blocks / split < 4)) break;
    const long long per_split = (k_blocks + split - 1) / split;
    const long long units = tiles * ((k_blocks + per_split - 1) / per_split);
    // Ping-pong blocks run their two warpgroups' tiles one after the other: a block is a slot.
    const long long waves = (units + sm_count - 1) / sm_count;
    const double penalty = split > 1 ? kSm90SplitPenaltyBlocks : 0.0;
    const double cost = static_cast<double>(waves) * area * per_mac * (static_cast<double>(per_split) + penalty);
    if (cost < *best_cost) {
      *best_cost = cost;
      *best = Sm90Plan{config, split};
    }
  }
}

}  // namespace

// The int8 kernel unpacking B as it runs pays for the unpacking in the GEMM's own time (about 20
// us of 178 at 2048 x 14336 x 4096: its stores of 1 byte per weight, and its first wave's wait for
// the first segments of its column tiles, docs/design/int4.md), so it beats the separate pass only
// where the GEMM is long and its first wave need not wait long for its column tiles. H100,
// 2026-11-27, us against the pass then the int8 kernel (bench_int4_tiled, docs/design/int4.md):
// 8B up (K = 4096) at M = 1024 / 1536 / 2048 / 3072 / 4096 139.6 / 167.2 / 202.0 / 310.4 / 399.3
// against 131.1 / 173.6 / 212.2 / 299.2 / 387.8; 8B qkv 73.3 / 90.5 / 95.9 / 146.1 / 175.7 against
// 60.2 / 86.7 / 103.1 / 137.9 / 178.9; 8B down (K = 14336) 138.7 / 193.5 / 199.6 / 292.4 / 395.1
// against 125.1 / 186.7 / 222.6 / 316.9 / 424.0; at 512 rows, where 8B down and qkv have too few
// tiles for every SM's unpacking warps, 2-3x slower.
bool use_sm90_unpack_ahead(int m, int k) {
  return m >= 2048 && (m < 3072 || k >= 8192);
}

Sm90Plan plan_sm90(int m, int n, int k, unsigned epilogue_family, bool column_scales, int sm_count, bool b_int4,
                   bool b_unpacks) {
  Sm90Plan best;
  double best_cost = 1e300;
  // A packed 4-bit B unpacked by the producer warps as the tiles run: the config measured with it.
  if (b_unpacks) return Sm90Plan{Sm90Config::kLargeUnpacking, 1};
  // A packed 4-bit B: the one config that unpacks it (use_sm90_int4 takes it only where its
  // tiles fill the SMs, so never split).
  if (b_int4) {
    const std::optional<Sm90Config> config = sm90_int4_config(m, n, sm_count);
    if (!config) throw std::logic_error("tcgemm: plan_sm90 got a packed 4-bit B that no sm90 config reads");
    return Sm90Plan{*config, 1};
  }
  // Weight scales per column and K block: the one config that stages a factor per column.
  if (epilogue_family == kEpiPerBlock && column_scales) return Sm90Plan{Sm90Config::kBlockColumns, 1};
  if (epilogue_family == kEpiPerBlock) {
    // The configs that can promote (TileConfig::kSupportsPerBlock). The 128x128 block config's
    // per-MAC factor is a first estimate (narrower wgmma than Large).
    sm90_consider<sm90::Block>(Sm90Config::kBlock, 1.1, m, n, k, 0, &best, &best_cost, sm_count);
    sm90_consider<sm90::Small>(Sm90Config::kSmall, 1.3, m, n, k, 0, &best, &best_cost, sm_count);
    sm90_consider<sm90::Tiny>(Sm90Config::kTiny, 2.2, m, n, k, 0, &best, &best_cost, sm_count);
    return best;
  }
  const int splits = epilogue_family == kEpiInt32 ? sm_count : 0;  // splits only while 2 * tiles <= this
  sm90_consider<sm90::Large>(Sm90Config::kLarge, 1.0, m, n, k, splits, &best, &best_cost, sm_count);
  sm90_consider<sm90::PingPong>(Sm90Config::kPingPong, k <= 4096 ? 0.97 : 1.04, m, n, k, splits, &best, &best_cost,
                                sm_count);
  sm90_consider<sm90::Small>(Sm90Config::kSmall, 1.3, m, n, k, splits, &best, &best_cost, sm_count);
  sm90_consider<sm90::Tiny>(Sm90Config::kTiny, 2.2, m, n, k, splits, &best, &best_cost, sm_count);
  return best;
}

}  // namespace tcgemm

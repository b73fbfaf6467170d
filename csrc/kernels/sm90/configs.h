// The sm90 (wgmma + TMA) kernel's tile configs: the template, and the configs by regime that
// dispatch/plan.cpp chooses among (measured on the H200: docs/design/sm90.md).
#pragma once

#include "common/scale_layout.h"
#include "epilogue/epilogues.h"

namespace tcgemm::sm90 {

// A block is one producer warpgroup (TMA) and two consumer warpgroups (wgmma); K advances 128
// bytes per pipeline stage, one 128-byte swizzle row per operand row.
//   cooperative (PingPong = false): the WgM x WgN consumer warpgroups split each BM x BN tile,
//     each owning (BM / WgM) x (BN / WgN);
//   ping-pong (PingPong = true, WgM = WgN = 1): the two consumer warpgroups take alternate
//     tiles whole, so one's epilogue overlaps the other's main loop (the ring hands out K blocks
//     in tile order, which keeps the two main loops mostly apart).
// A warpgroup's piece is MmaM = rows / 64 stacked m64nWNk32 wgmma per 32 K bytes.
// Epilogues: the kEpi* families (epilogue/epilogues.h) the config is instantiated for.
// ColumnFactors: per-block configs that stage a promotion factor per column as well as per row,
// for weight scales with one value per column and K block ([N, ceil(K/128)]).
// BInt4: B is a packed 4-bit weight (GemmProblem::b_int4, two-level or unscaled): TMA brings each
// stage's B packed, [BN][64] bytes unswizzled, and the consumer warpgroups unpack the next K
// block's, times its int8 group scales, into one of two swizzled int8 B tiles while the current
// block's wgmma run (kernels/sm90/sm90_unpack.cuh).
// BUnpacks: B's int8 weight is written from a packed one by the producer warpgroup's warps 1-3 as
// the tiles run (GemmProblem::b_unpack, kernels/sm90/sm90_unpack_ahead.cuh); the loads of B wait
// for their pieces. A config of its own, so that the kernels of given int8 weights keep their code.
// GroupM: tile rows per scheduler group, or 0 for all of them (a column tile at a time).
template <int BM, int BN, int WgM, int WgN, int Stages, bool PingPong, unsigned Epilogues, int GroupM = 8,
          bool ColumnFactors = false, bool BInt4 = false, bool BUnpacks = false>
struct TileConfig {
  static constexpr unsigned kEpilogues = Epilogues;
  static constexpr bool kPingPong = PingPong;
  static constexpr int kWgM = WgM, kWgN = WgN;
  static constexpr int kConsumerWarpgroups = PingPong ? 2 : WgM * WgN;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kBM = BM;
  static constexpr int kBN = BN;
  static constexpr int kWgRows = BM / WgM;
  static constexpr int kWN = BN / WgN;
  static constexpr int kMmaM = kWgRows / 64;
  static constexpr int kBK = 128;
  static constexpr int kMmaK = 32;
  static constexpr int kStages = Stages;
  static constexpr int kGroupM = GroupM;  // rasterization: tile rows per group (L2 reuse of B); 0: all
  static constexpr int kAccRegs = kWN / 2;  // per m64 piece
  // Per-block scaled GEMM (epilogue/block_scales.h): two int32 sets and an fp32 set of
  // accumulators; a tile's columns must lie in one 128-column block of the weight scales, and a
  // K block of the ring is one scale block.
  static constexpr bool kSupportsPerBlock =
      !PingPong && kScaleBlock % kBN == 0 && 2 * kMmaM * kAccRegs <= 128 && kBK == kScaleBlock;
  // Promotion factors staged in shared memory (kernels/sm90/sm90_factors.cuh), in configs built
  // for per-block scales: slots of kBM row factors, then (ColumnFactors) kBN column factors.
  static constexpr bool kColumnFactors = ColumnFactors;
  static constexpr int kFactorSlots = (Epilogues & kEpiPerBlock) ? 3 : 0;
  static constexpr int kFactorSlotFloats = kBM + (ColumnFactors ? kBN : 0);
  static constexpr int kFactorBytes = kFactorSlots * kFactorSlotFloats * 4;
  // Warps that read a ring slot: each frees it with one arrival (one per lane with per-block
  // scales, whose promotion factors the lanes read with plain loads: sm90_factors.cuh).
  static constexpr int kSlotReaders = PingPong ? 4 : 4 * kConsumerWarpgroups;

  static constexpr int kATileBytes = kBM * kBK;
  static constexpr int kBTileBytes = kBN * kBK;
  static constexpr bool kBInt4 = BInt4;
  static constexpr bool kBUnpacks = BUnpacks;
  static constexpr int kBPackedTileBytes = BInt4 ? kBN * kBK / 2 : 0;
  // A stage holds what TMA brings: A, and B as int8 or packed. A packed B's K blocks are unpacked
  // into kBInt8Tiles int8 tiles in turn (kernels/sm90/sm90_mainloop.cuh).
  static constexpr int kBTmaTileBytes = BInt4 ? kBPackedTileBytes : kBTileBytes;
  static constexpr int kStageBytes = kATileBytes + kBTmaTileBytes;
  static constexpr int kBInt8Tiles = BInt4 ? 2 : 0;
  // A packed B's int8 group scales of each ring slot's K block, one byte per tile row of B, written
  // by a producer warp (kernels/sm90/sm90_unpack.cuh, stage_group_scales).
  static constexpr int kGroupScaleBytes = BInt4 ? kStages * kBN : 0;

  // Epilogue staging: each consumer warp writes its 16 x WN rows of D 128 bytes of columns at a
  // time (one 128-byte swizzle row per output row: 32 int32/fp32 or 64 bf16/fp16 columns) into
  // one of its two buffers, and TMA stores it while the warp fills the other and then goes on
  // to its next tile. Per warp, so no barriers.
  static constexpr int kEpiRows = 16;
  static constexpr int kEpiRowBytes = 128;
  static constexpr int kEpiBufferBytes = kEpiRows * kEpiRowBytes;
  static constexpr int kEpiBytes = kConsumerWarpgroups * 4 * 2 * kEpiBufferBytes;

  // Stages, a packed B's int8 tiles, epilogue buffers, factor slots, group-scale slots, then 2
  // mbarriers per stage and one per int8 tile; +1024 to align everything to the 128-byte swizzle atom.
  static constexpr int kSmemBytes = kStages * kStageBytes + kBInt8Tiles * kBTileBytes + kEpiBytes + kFactorBytes +
                                    kGroupScaleBytes + (2 * kStages + kBInt8Tiles) * 8 + 1024;

  // setmaxnreg split of the registers the block holds from its launch (kThreads x the kernel's
  // register count, which is at most kLaunchRegs): setmaxnreg.inc waits until the pool has the
  // registers, so a split beyond it hangs the consumers. The producer needs few (with per-block
  // scales its factor warps, kernels/sm90/sm90_factors.cuh, spilled 192 bytes at 24; with column
  // factors they spill 80 bytes at 40), the consumers hold the accumulators (the per-block
  // config's three sets of 64 fit 232 since the factors come from shared memory). With BUnpacks
  // the producer's unpacking warps take 56 (their loop spilled 36 bytes at 40).
  static constexpr int kLaunchRegs = (65536 / kThreads < 255 ? 65536 / kThreads : 255) / 8 * 8;
  static constexpr int kProducerRegs = BUnpacks ? 56 : 40;
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 1 ? 240 : BUnpacks ? 224 : 232;

  static_assert(!PingPong || (WgM == 1 && WgN == 1), "ping-pong warpgroups take whole tiles");
  static_assert(kWgRows % 64 == 0 && kWgRows * WgM == BM && kWN * WgN == BN, "tile split");
  static_assert(kWN % 8 == 0 && kWN >= 8 && kWN <= 256, "wgmma N must be a multiple of 8 up to 256");
  static_assert(kMmaM * kAccRegs <= 128, "accumulators per consumer thread");
  static_assert(kBN <= 256 && kBM <= 256, "a TMA box holds at most 256 rows");
  static_assert(kATileBytes % 1024 == 0 && kBTileBytes % 1024 == 0, "tiles must keep 1024-byte alignment");
  static_assert(kWN * 2 % kEpiRowBytes == 0, "the epilogue stores whole 128-byte chunks of a warp's rows");
  static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an H100/H200 block can have");
  static_assert(128 * kProducerRegs + 128 * kConsumerWarpgroups * kConsumerRegs <= kThreads * kLaunchRegs,
                "the setmaxnreg split exceeds the registers the block holds");
  static_assert(!(Epilogues & kEpiPerBlock) || kSupportsPerBlock, "config cannot promote per-block scales");
  static_assert(!ColumnFactors || Epilogues == kEpiPerBlock, "column factors serve per-block scales only");
  static_assert(!ColumnFactors || kWgN == 1, "the column factors are read at the tile's columns");
  static_assert(!BInt4 || (!(Epilogues & kEpiPerBlock) && !PingPong),
                "4-bit B: the int32 sums run over all of K (no promotion), cooperative warpgroups");
  static_assert(kBPackedTileBytes % 1024 == 0, "tiles must keep 1024-byte alignment");
  static_assert(kGroupScaleBytes % 8 == 0, "the mbarriers after the group-scale slots need 8-byte alignment");
  static_assert(!BUnpacks || (!BInt4 && !(Epilogues & kEpiPerBlock) && GroupM == 0),
                "B unpacked ahead: an int8 B, sums over all of K, a column tile at a time");
};

constexpr unsigned kAnyScaling = kEpiInt32 | kEpiScaled;

// Large: 128x256, two cooperative consumer warpgroups of 64x256, 4 stages of 48 KiB.
using Large = TileConfig<128, 256, 2, 1, 4, false, kAnyScaling>;
// Ping-pong: 128x128 tiles, each consumer warpgroup computes whole tiles (2 x m64n128) in turn,
// 6 stages of 32 KiB: one warpgroup's epilogue hides under the other's main loop.
// (A cooperative 128x128 config measured the same as ping-pong 128x128 at M = 128 and 256,
// 463 vs 460 and 1000 vs 986 TOPS, and was dropped.)
using PingPong = TileConfig<128, 128, 1, 1, 6, true, kAnyScaling>;
// Small M (<= 64 rows): 64x128, two consumer warpgroups of 64x64 side by side, 8 stages of 24 KiB;
// these problems stream B, so the deep ring matters more than the MMA shape.
using Small = TileConfig<64, 128, 1, 2, 8, false, kAnyScaling | kEpiPerBlock>;
// Tiny: 64x64, one consumer warpgroup, 12 stages of 16 KiB: twice the tiles of Small, so that
// skinny problems fill the SMs without splitting K.
using Tiny = TileConfig<64, 64, 1, 1, 12, false, kAnyScaling | kEpiPerBlock>;
// Per-block scaled GEMM (1x128 x 128x128 scales), large problems: 128x128, two cooperative
// consumer warpgroups of 64x128, 6 stages of 32 KiB. Promotion needs two int32 sets and an fp32
// set of accumulators, which rules out 256-wide and 128-row warpgroup pieces.
using Block = TileConfig<128, 128, 2, 1, 6, false, kEpiPerBlock>;
// Per-block scaled GEMM with weight scales per column and K block ([N, ceil(K/128)]): Block with
// a factor per column as well, so 5 stages (a sixth and the column factors exceed 227 KiB).
using BlockColumns = TileConfig<128, 128, 2, 1, 5, false, kEpiPerBlock, 8, true>;
// Packed 4-bit B (two-level or unscaled weights): 256x128, two cooperative consumer warpgroups of
// 128x128, 4 stages of 40 KiB (A 32, packed B 8) and two int8 B tiles of 16 KiB. Per K block the
// unpacking moves 8 KiB in and 16 KiB out of shared memory, half what a 128x256 tile's would for
// the same MACs.
using Int4 = TileConfig<256, 128, 2, 1, 4, false, kAnyScaling, 8, false, true>;
// Packed 4-bit B at up to 64 rows (to 128 where 128x128 tiles are too few): 64x128, two consumer
// warpgroups of 64x64 side by side, each unpacking its own 64 rows of B, 8 stages of 16 KiB (A 8,
// packed B 8). A 256-row tile's wgmma at 17-64 rows are mostly rows of zeros.
using Int4Small = TileConfig<64, 128, 1, 2, 8, false, kAnyScaling, 8, false, true>;
// Packed 4-bit B at 65-128 rows (to 512 where 256x128 tiles are too few): 128x128, two consumer
// warpgroups of 64x128, 6 stages of 24 KiB.
using Int4Mid = TileConfig<128, 128, 2, 1, 6, false, kAnyScaling, 8, false, true>;
// Large with a packed 4-bit B unpacked by the producer warps as the tiles run (BUnpacks), the
// tiles a column tile at a time: the first wave of blocks then needs about grid / tiles_m column
// tiles unpacked (in groups of 8 tile rows it needs 17 at 2048 rows, and waits for them: H100,
// 8B up 226.5 us against 214.2 unpacked first, docs/design/int4.md).
using LargeUnpacking = TileConfig<128, 256, 2, 1, 4, false, kAnyScaling, 0, false, false, true>;

// The W4 kernel (sm90_w4.cuh): a packed 4-bit weight as wgmma's register operand A, computing
// D^T = W x^T a tile of kBN weight rows by kRowsM rows of x at a time. A block is one producer
// warpgroup (one thread issues the TMA loads of x and the packed weight) and Wgs consumer
// warpgroups, each owning 64 weight rows: per K block a thread reads two 16-byte pieces of its
// two rows, unpacks them into the A fragments of four m64nRowsMk32 wgmma (common/int4.h:
// unpack_int4x8_scaled_even_odd_biased) and issues them against x's K block tile; the next K
// block is unpacked while they run (two register sets of A).
// BlocksPerSM: blocks an SM holds at once (registers and shared memory split between them), so
// that one block's ring fill and epilogue overlap another's main loop and each scheduler has more
// warps to pick from while the unpacking waits on its own results.
// Epilogues: kAnyScaling, with kEpiPerBlock for the configs whose registers hold the fp32
// accumulators and the second int32 set that per-K-block promotion takes (sm90_w4.cuh).
// The most blocks of a cluster that share a W4 tile's K blocks (its epilogue adds their sums).
constexpr int kW4MaxSplit = 4;
template <int RowsM, int Wgs, int Stages, int BlocksPerSM = 1, unsigned Epilogues = kAnyScaling>
struct W4Config {
  static constexpr unsigned kEpilogues = Epilogues;
  static constexpr bool kPromotes = (Epilogues & kEpiPerBlock) != 0;
  static constexpr int kRowsM = RowsM;                  // rows of x per tile: wgmma N
  static constexpr int kWgs = Wgs;                      // consumer warpgroups
  static constexpr int kBN = 64 * Wgs;                  // weight rows per tile
  static constexpr int kBK = 128;
  static constexpr int kMmaK = 32;
  static constexpr int kStages = Stages;
  // K blocks whose copies the producer issues together once the ring's first round is out: two
  // (a weight row's 128 bytes at once) where the ring has 6 stages or more; with 4, waiting for
  // two free slots empties the ring too far (sm90_w4.cuh).
  static constexpr int kLoadGroup = Stages >= 6 ? 2 : 1;
  static constexpr int kBlocksPerSM = BlocksPerSM;
  static constexpr int kThreads = 128 * (1 + Wgs);
  static constexpr int kConsumerThreads = 128 * Wgs;
  static constexpr int kAccRegs = RowsM / 2;
  static constexpr int kXTileBytes = RowsM * kBK;       // [RowsM][128], 128-byte swizzle
  static constexpr int kWTileBytes = kBN * kBK / 2;     // [kBN][64] packed, unswizzled
  static constexpr int kStageBytes = kXTileBytes + kWTileBytes;
  // The ring, its mbarriers, and 1024 bytes to align the ring to the swizzle atom; the scales come on top.
  static constexpr int kRingSmemBytes = Stages * kStageBytes + 2 * Stages * 8 + 1024;
  // Shared memory a block may use: an SM's 228 KiB shared by its blocks, 1 KiB of each the driver's.
  static constexpr int kSmemBudget =
      (228 * 1024 / BlocksPerSM - 1024) < 227 * 1024 ? (228 * 1024 / BlocksPerSM - 1024) : 227 * 1024;
  // The group scales of a block's K blocks, read once into what the ring leaves: at most
  // kMaxScaleBlocks (dispatch splits K further), rows an odd number of words apart; sized at launch.
  static constexpr int kMaxScaleBlocksFit = ((kSmemBudget - kRingSmemBytes) / kBN - 4) / 4 * 4;
  static constexpr int kMaxScaleBlocks = kMaxScaleBlocksFit < 256 ? kMaxScaleBlocksFit : 256;
  static constexpr int kMaxScaleBytes = kBN * (kMaxScaleBlocks + 4);
  // The same for fp32 per-K-block weight scales (kPromotes; rows an odd number of words apart).
  static constexpr int kMaxFloatScaleBlocksFit =
      kPromotes ? ((kSmemBudget - kRingSmemBytes) / (4 * kBN) - 1) / 2 * 2 : 0;
  static constexpr int kMaxFloatScaleBlocks = kMaxFloatScaleBlocksFit < 256 ? kMaxFloatScaleBlocksFit : 256;
  static constexpr int kMaxFloatScaleBytes = 4 * kBN * (kMaxFloatScaleBlocks + 1);
  static constexpr int kMaxSmemBytes =
      kRingSmemBytes + (kMaxScaleBytes > kMaxFloatScaleBytes ? kMaxScaleBytes : kMaxFloatScaleBytes);
  // The epilogue's tile of int32 sums [RowsM][kTilePitch] in shared memory, over the ring, which
  // the block's K blocks no longer use (a pitch of 4 words past a multiple of 32: no bank conflicts).
  static constexpr int kTilePitch = kBN + 4;
  static constexpr int kTileBytes = RowsM * kTilePitch * 4;
  static constexpr int kLaunchRegs =
      (65536 / (kThreads * BlocksPerSM) < 255 ? 65536 / (kThreads * BlocksPerSM) : 255) / 8 * 8;
  static constexpr int kProducerRegs = BlocksPerSM > 1 ? 32 : 40;
  static constexpr int kConsumerRegsFit = (kThreads * kLaunchRegs - 128 * kProducerRegs) / kConsumerThreads / 8 * 8;
  static constexpr int kConsumerRegs = kConsumerRegsFit < 232 ? kConsumerRegsFit : 232;

  static_assert(RowsM == 32 || RowsM == 64 || RowsM == 128 || RowsM == 256, "wgmma N of the W4 tiles");
  static_assert(kXTileBytes % 1024 == 0 && kWTileBytes % 1024 == 0, "tiles must keep 1024-byte alignment");
  static_assert(kBN <= 256, "a TMA box holds at most 256 rows");
  static_assert(kTileBytes <= Stages * kStageBytes, "the tile of sums must fit over the ring");
  static_assert(kMaxScaleBlocks >= 64, "too little shared memory left for the group scales");
  static_assert(!kPromotes || kMaxFloatScaleBlocks >= 64, "too little shared memory left for fp32 block scales");
  static_assert(!kPromotes || (BlocksPerSM == 1 && RowsM <= 64),
                "promotion holds two int32 sets and an fp32 set of accumulators: lone blocks of at most 64 rows");
  static_assert(kMaxSmemBytes <= kSmemBudget, "more shared memory than the block's share of the SM");
  static_assert(128 * kProducerRegs + kConsumerThreads * kConsumerRegs <= kThreads * kLaunchRegs,
                "the setmaxnreg split exceeds the registers the block holds");
};

// By rows of x: 17-32, 33-64, 65-128, and 129 up (tiles of 256 rows); W4Rows128Wg3 below. Up to 64 rows, two configs:
// one block per SM with a deep ring, and two blocks per SM ("paired") with half of it each, where
// the tiles fill the second slots (dispatch/plan.cpp: plan_sm90_w4). fp32 group scales (promoted
// per K block) on the lone ones only.
using W4Rows32 = W4Config<32, 2, 8, 1, kAnyScaling | kEpiPerBlock>;
using W4Rows32Paired = W4Config<32, 2, 6, 2>;
using W4Rows64 = W4Config<64, 2, 8, 1, kAnyScaling | kEpiPerBlock>;
using W4Rows64Paired = W4Config<64, 2, 4, 2>;
using W4Rows128 = W4Config<128, 2, 6>;
using W4Rows256 = W4Config<256, 2, 4>;
// Three consumer warpgroups (192 weight rows a tile) at 65-512 rows of x, in tiles of 128 rows:
// where its plan costs less than that of W4Rows128 or W4Rows256, whose tiles need more waves or
// fill fewer SMs (dispatch/plan.cpp: plan_w4_wg3).
using W4Rows128Wg3 = W4Config<128, 3, 5>;

}  // namespace tcgemm::sm90

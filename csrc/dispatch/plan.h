// Per-family plan rules: which tile config (and K split) runs a problem, by shape and epilogue.
// The configs themselves belong to their kernel families (kernels/<family>/configs.h).
#pragma once

#include <optional>

namespace tcgemm {

// Skinny problems (few rows of A against a wide B: decode-time linear layers) stream B; the
// skinny kernel reads it straight into registers with many K blocks in flight, on sm80 and sm90
// alike. vs_sm90: whether the alternative is the sm90 kernels (else the sm80 ones).
bool use_skinny(int m, int n, int k, int sm_count, bool vs_sm90, bool b_int4 = false);

// One row of A against an int8 B on sm90 (the sm90 backend's dispatch): whether the GEMV
// (kernels/gemv/gemv_int8.h) takes it rather than the skinny kernel, where the kernels allow
// (dispatch/launch.h: runs_on_gemv). B of 20 MiB or more: there the GEMV streams B faster than the
// skinny kernel by more than the separate quantization of A costs the layer (docs/design/gemv.md).
bool use_gemv(int m, int n, int k, bool b_int4);

enum class SkinnyConfig { kRows16Cols16, kRows16Cols32, kRows32Cols16 };
SkinnyConfig plan_skinny(int m, int n, int sm_count, bool b_int4 = false);

// Packed 4-bit B on the skinny kernel, sm_90+: how many blocks of a cluster share each tile's
// K blocks (GemmProblem::cluster_k_split): 1 or 2.
int plan_skinny_int4_split(int m, int n, int k, int sm_count);

// Packed 4-bit B at 17-64 rows against the sm90 kernels: whether the skinny kernel takes it (its
// 32-row tiles): up to 32 rows, and up to 64 where the tiled kernel's 64x128 tiles are too few.
bool use_skinny_int4(int m, int n, int sm_count);

// Packed 4-bit B off the skinny route on sm90: whether the tiled kernel reads it as it is (one of
// its Int4 configs, unpacking each K block in shared memory) rather than the binding layer
// unpacking it into int8 for the int8 kernels: at most 512 rows, and tiles that fill the SMs.
bool use_sm90_int4(int m, int n, int sm_count);

// Packed 4-bit B on sm90 where the W4 kernel (kernels/sm90/sm90_w4.cuh, the weight as wgmma's
// register operand) takes it: 17-512 rows, K a multiple of 128. Its config by rows of A, and the
// blocks of a cluster that share each tile's K blocks (1, 2 or 4); none outside those shapes.
enum class W4Config { kRows32, kRows32Paired, kRows64, kRows64Paired, kRows128, kRows256, kRows128Wg3 };
constexpr int kW4Configs = 7;
struct W4Plan {
  W4Config config = W4Config::kRows64;
  int split = 1;
};
// The K splits the W4 plan tries: the blocks of a cluster that share each tile's K blocks.
constexpr int kW4Splits[3] = {1, 2, 4};
// Blocks of each W4 config (by W4Config) the device runs at once in clusters of each of
// kW4Splits (kernels/sm90/sm90_w4.h: w4_resident_blocks); 0: unknown, taken as the config's
// blocks per SM on every SM.
struct W4Residency {
  int blocks[kW4Configs][3] = {};
};
std::optional<W4Plan> plan_sm90_w4(int m, int n, int k, int sm_count, const W4Residency& resident, bool per_block);

enum class Sm80Config { kLarge, kSmall, kBlock };
struct Sm80Plan {
  Sm80Config config = Sm80Config::kLarge;
  int split_k = 1;
};
// epilogue_family: the kEpi* family of the epilogue (epilogue/epilogues.h).
Sm80Plan plan_sm80(int m, int n, int k, unsigned epilogue_family, int sm_count, int smem_optin);

enum class Sm90Config {
  kLarge, kPingPong, kSmall, kTiny, kBlock, kBlockColumns, kInt4, kInt4Mid, kInt4Small, kLargeUnpacking
};
// The config of the tiled sm90 kernel for a packed 4-bit B (kInt4Small, kInt4Mid or kInt4), or
// none where use_sm90_int4 is false: by M, the largest tiles up to M's range that fill the SMs.
std::optional<Sm90Config> sm90_int4_config(int m, int n, int sm_count);

struct Sm90Plan {
  Sm90Config config = Sm90Config::kLarge;
  int split_k = 1;
};
// column_scales: per-block weight scales with one value per column and K block ([N, ceil(K/128)]).
// b_int4: B is a packed 4-bit weight, read as it is (the Int4 config, unsplit; never per-block).
// b_unpacks: B is unpacked by the kernel as it runs (GemmProblem::b_unpack: LargeUnpacking, unsplit).
Sm90Plan plan_sm90(int m, int n, int k, unsigned epilogue_family, bool column_scales, int sm_count,
                   bool b_int4 = false, bool b_unpacks = false);

// Whether a packed 4-bit B that the sm90 kernel does not read as it is (use_sm90_int4) is unpacked
// by the int8 kernel as it runs (kernels/sm90/sm90_unpack_ahead.cuh) rather than by a pass before it.
bool use_sm90_unpack_ahead(int m, int k);

}  // namespace tcgemm

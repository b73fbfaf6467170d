#include "dispatch/launch.h"

#include <optional>
#include <stdexcept>
#include <string>

#include "common/int4.h"
#include "dispatch/plan.h"
#include "epilogue/int32_epilogue_fill.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/gemv/gemv_int8.h"
#include "kernels/skinny/configs.h"
#include "kernels/skinny/skinny_gemm.h"
#include "kernels/sm80/configs.h"
#include "kernels/sm80/sm80_gemm.h"
#include "kernels/sm90/configs.h"
#include "kernels/sm90/sm90_gemm.h"
#include "kernels/sm90/sm90_tensor_map.h"
#include "kernels/sm90/sm90_unpack_ahead.h"
#include "kernels/sm90/sm90_w4.h"
#include "kernels/wmma/configs.h"
#include "kernels/wmma/wmma_gemm.h"

namespace tcgemm {
namespace {

// Split-K plans: D starts as epilogue(0), onto which the splits add their partial sums.
void prefill_for_split(const GemmProblem& p, const EpilogueArgs& epilogue) {
  if (p.split_k > 1) launch_epilogue_fill(p, std::get<Int32EpilogueParams>(epilogue));
}

// Packed 4-bit B with the K split of skinny_int4_split.
GemmProblem with_int4_split(GemmProblem p, const DeviceInfo& dev, bool per_block) {
  if (p.b_int4) p.cluster_k_split = skinny_int4_split(p.m, p.n, p.k, dev, per_block);
  return p;
}

void run_skinny(const GemmProblem& given, const EpilogueArgs& epilogue, const DeviceInfo& dev) {
  const GemmProblem p = with_int4_split(given, dev, epilogue_family_of(epilogue) == kEpiPerBlock);
  const SkinnyConfig config = plan_skinny(p.m, p.n, dev.sm_count, p.b_int4);
  with_epilogue(epilogue, p.d.type, [&](const auto& epi) {
    switch (config) {
      case SkinnyConfig::kRows16Cols16: return skinny::launch<skinny::Rows16Cols16>(p, epi, dev.sm_count);
      case SkinnyConfig::kRows16Cols32: return skinny::launch<skinny::Rows16Cols32>(p, epi, dev.sm_count);
      case SkinnyConfig::kRows32Cols16: return skinny::launch<skinny::Rows32Cols16>(p, epi, dev.sm_count);
    }
  });
}

void run_gemv(const GemmProblem& p, const EpilogueArgs& epilogue, const DeviceInfo& dev) {
  with_epilogue(epilogue, p.d.type, [&](const auto& epi) { gemv::launch(p, epi, dev.sm_count); });
}

void run_sm80(GemmProblem p, const EpilogueArgs& epilogue, const DeviceInfo& dev) {
  if (use_skinny(p.m, p.n, p.k, dev.sm_count, /*vs_sm90=*/false, p.b_int4)) return run_skinny(p, epilogue, dev);
  const Sm80Plan plan = plan_sm80(p.m, p.n, p.k, epilogue_family_of(epilogue), dev.sm_count, dev.smem_optin);
  p.split_k = plan.split_k;
  prefill_for_split(p, epilogue);
  with_epilogue(epilogue, p.d.type, [&](const auto& epi) {
    switch (plan.config) {
      case Sm80Config::kLarge: return sm80::launch<sm80::Large>(p, epi);
      case Sm80Config::kSmall: return sm80::launch<sm80::Small>(p, epi);
      case Sm80Config::kBlock: return sm80::launch<sm80::Block>(p, epi);
    }
  });
}

// f(Cfg{}) with the W4 config type of `config`.
template <class F>
void with_w4_config(W4Config config, F&& f) {
  switch (config) {
    case W4Config::kRows32: return f(sm90::W4Rows32{});
    case W4Config::kRows32Paired: return f(sm90::W4Rows32Paired{});
    case W4Config::kRows64: return f(sm90::W4Rows64{});
    case W4Config::kRows64Paired: return f(sm90::W4Rows64Paired{});
    case W4Config::kRows128: return f(sm90::W4Rows128{});
    case W4Config::kRows256: return f(sm90::W4Rows256{});
    case W4Config::kRows128Wg3: return f(sm90::W4Rows128Wg3{});
  }
}

void run_sm90_w4(const GemmProblem& p, const EpilogueArgs& epilogue, const DeviceInfo& dev) {
  if (p.b_zero_point != nullptr)
    throw std::logic_error("tcgemm: the W4 kernel got 4-bit zero points, which it does not read");
  const bool per_block = epilogue_family_of(epilogue) == kEpiPerBlock;
  const std::optional<W4Plan> plan = plan_sm90_w4(p.m, p.n, p.k, dev.sm_count, dev.w4_resident, per_block);
  if (!plan) throw std::logic_error("tcgemm: run_sm90 got an A in the W4 order for a shape the W4 kernel declines");
  with_epilogue(epilogue, p.d.type, [&](const auto& epi) {
    with_w4_config(plan->config, [&](auto cfg) { sm90::launch_w4<decltype(cfg)>(p, epi, plan->split); });
  });
}

void run_sm90(GemmProblem p, const EpilogueArgs& epilogue, const DeviceInfo& dev) {
  if (p.a_w4_order) return run_sm90_w4(p, epilogue, dev);
  if (runs_on_gemv(Backend::kSm90, p.m, p.n, p.k, p.b, p.b_int4, epilogue_family_of(epilogue) == kEpiPerBlock) &&
      gemv::fits(p))
    return run_gemv(p, epilogue, dev);
  if (use_skinny(p.m, p.n, p.k, dev.sm_count, /*vs_sm90=*/true, p.b_int4)) return run_skinny(p, epilogue, dev);
  if (p.b_zero_point != nullptr)
    throw std::logic_error("tcgemm: run_sm90 got 4-bit zero points, which the skinny kernel reads only");
  const auto* scaled = std::get_if<ScaledEpilogueParams>(&epilogue);
  const bool column_scales = scaled != nullptr && scaled->b.per_row_block();
  const Sm90Plan plan = plan_sm90(p.m, p.n, p.k, epilogue_family_of(epilogue), column_scales, dev.sm_count, p.b_int4,
                                  p.b_unpack != nullptr);
  p.split_k = plan.split_k;
  prefill_for_split(p, epilogue);
  with_epilogue(epilogue, p.d.type, [&](const auto& epi) {
    switch (plan.config) {
      case Sm90Config::kLarge: return sm90::launch<sm90::Large>(p, epi, dev.sm_count);
      case Sm90Config::kPingPong: return sm90::launch<sm90::PingPong>(p, epi, dev.sm_count);
      case Sm90Config::kSmall: return sm90::launch<sm90::Small>(p, epi, dev.sm_count);
      case Sm90Config::kTiny: return sm90::launch<sm90::Tiny>(p, epi, dev.sm_count);
      case Sm90Config::kBlock: return sm90::launch<sm90::Block>(p, epi, dev.sm_count);
      case Sm90Config::kBlockColumns: return sm90::launch<sm90::BlockColumns>(p, epi, dev.sm_count);
      case Sm90Config::kInt4: return sm90::launch<sm90::Int4>(p, epi, dev.sm_count);
      case Sm90Config::kInt4Mid: return sm90::launch<sm90::Int4Mid>(p, epi, dev.sm_count);
      case Sm90Config::kInt4Small: return sm90::launch<sm90::Int4Small>(p, epi, dev.sm_count);
      case Sm90Config::kLargeUnpacking: return sm90::launch<sm90::LargeUnpacking>(p, epi, dev.sm_count);
    }
  });
}

void run_wmma(const GemmProblem& p, const EpilogueArgs& epilogue, const DeviceInfo& dev, bool simple) {
  // The classic design's fallback: one warp per tile when the device lacks the tiled kernel's smem.
  const bool tiled = !simple && dev.smem_optin >= wmma_gemm::Config::kSmemBytes;
  with_epilogue(epilogue, p.d.type, [&](const auto& epi) {
    if (tiled) return wmma_gemm::launch(p, epi, dev.sm_count);
    wmma_gemm::launch_simple(p, epi, dev.sm_count);
  });
}

}  // namespace

void run_gpu(Backend b, const GemmProblem& p, const EpilogueArgs& epilogue, const DeviceInfo& dev) {
  if (p.b_int4 && !reads_packed_b(b, p, dev, epilogue_family_of(epilogue) == kEpiPerBlock))
    throw std::logic_error("tcgemm: run_gpu got a 4-bit B that no kernel of its route reads");
  if (p.k == 0) {  // A @ B is all zeros: no GEMM kernel needed
    const auto* int32 = std::get_if<Int32EpilogueParams>(&epilogue);
    if (int32 == nullptr) throw std::logic_error("tcgemm: run_gpu got K = 0 for an epilogue without a fill");
    return launch_epilogue_fill(p, *int32);
  }
  switch (b) {
    case Backend::kWmma: return run_wmma(p, epilogue, dev, /*simple=*/false);
    case Backend::kWmmaSimple: return run_wmma(p, epilogue, dev, /*simple=*/true);
    case Backend::kSm80: return run_sm80(p, epilogue, dev);
    case Backend::kSm90: return run_sm90(p, epilogue, dev);
    case Backend::kSkinny: return run_skinny(p, epilogue, dev);
    case Backend::kAuto:
    case Backend::kCpu: break;
  }
  throw std::logic_error(std::string("tcgemm: run_gpu got non-GPU backend ") + backend_name(b));
}

bool runs_on_skinny(Backend b, int m, int n, int k, const DeviceInfo& dev, bool b_int4) {
  switch (b) {
    case Backend::kSkinny: return true;
    case Backend::kSm80: return use_skinny(m, n, k, dev.sm_count, /*vs_sm90=*/false, b_int4);
    case Backend::kSm90: return use_skinny(m, n, k, dev.sm_count, /*vs_sm90=*/true, b_int4);
    default: return false;
  }
}

bool runs_on_gemv(Backend b, int m, int n, int k, const Operand& weight, bool b_int4, bool per_block) {
  return b == Backend::kSm90 && !per_block && use_gemv(m, n, k, b_int4) && gemv::fits_b(weight, k, b_int4);
}

int skinny_int4_split(int m, int n, int k, const DeviceInfo& dev, bool per_block) {
  return !per_block && dev.major >= 9 && dev.sm90_kernels ? plan_skinny_int4_split(m, n, k, dev.sm_count) : 1;
}

W4Residency w4_residency() {
  W4Residency r;
  for (int c = 0; c < kW4Configs; ++c) {
    with_w4_config(static_cast<W4Config>(c), [&](auto cfg) {
      for (int i = 0; i < 3; ++i) r.blocks[c][i] = sm90::w4_resident_blocks<decltype(cfg)>(kW4Splits[i]);
    });
  }
  return r;
}

bool runs_on_w4(Backend b, int m, int n, int k, const Operand& packed_b, const DeviceInfo& dev, bool per_block) {
  return b == Backend::kSm90 && plan_sm90_w4(m, n, k, dev.sm_count, dev.w4_resident, per_block).has_value() &&
         sm90::packed_tma_describable(packed_b, n, k);
}

bool a_w4_order(Backend b, const GemmProblem& p, const DeviceInfo& dev, bool per_block) {
  // int8 group scales and fp32 scales per K block together, or zero points: not on the W4 kernel
  return p.b_int4 && p.a.is_signed && !(per_block && p.b_group_scale != nullptr) && p.b_zero_point == nullptr &&
         runs_on_w4(b, p.m, p.n, p.k, p.b, dev, per_block);
}

bool reads_packed_b(Backend b, const GemmProblem& p, const DeviceInfo& dev, bool per_block) {
  if (a_w4_order(b, p, dev, per_block)) return true;
  // Zero points: the skinny kernel's promoting sums only.
  if (runs_on_skinny(b, p.m, p.n, p.k, dev, /*b_int4=*/true))
    return skinny::packed_b_fits(p.b, p.n) && p.a.is_signed && (p.b_zero_point == nullptr || per_block);
  // The sm90 kernel unpacks B in shared memory where the int32 sums run over all of K.
  return b == Backend::kSm90 && !per_block && p.b_zero_point == nullptr && use_sm90_int4(p.m, p.n, dev.sm_count) &&
         sm90::tma_describable(p.a, p.m, p.k) && sm90::packed_tma_describable(p.b, p.n, p.k);
}

bool unpacks_in_gemm(Backend b, const GemmProblem& p, const DeviceInfo& dev, bool per_block) {
  if (!p.b_int4 || b != Backend::kSm90 || per_block || p.b_zero_point != nullptr ||
      runs_on_skinny(b, p.m, p.n, p.k, dev, /*b_int4=*/true) || reads_packed_b(b, p, dev, per_block))
    return false;
  return use_sm90_unpack_ahead(p.m, p.k) && p.b.k_major() &&
         sm90::in_gemm_unpackable(p.b.ptr, packed_b_row_stride(p), p.k);
}

int64_t packed_b_row_stride(const GemmProblem& p) { return p.n == 1 ? p.k / kInt4PerByte : p.b.stride_row; }

void run_skinny_quantizing(const GemmProblem& given, const ScaledEpilogueParams& e, const QuantizeParams& xq,
                           const DeviceInfo& dev) {
  const GemmProblem p = with_int4_split(given, dev, e.per_block());
  if (e.asymmetric()) throw std::logic_error("tcgemm: the skinny kernel quantizes A symmetrically only");
  const bool launched = select_epilogue<KernelQuantizingEpilogues>(e, p.d.type, [&](const auto& epi) {
    skinny::launch_quantizing(p, epi, xq, dev.sm_count, dev.smem_optin);
  });
  if (!launched) throw std::logic_error("tcgemm: the skinny kernel quantizes A for the scaled epilogue only");
}

void run_cpu(const GemmProblem& p, const EpilogueArgs& epilogue, int64_t m_begin, int64_t m_end) {
  cpu::gemm_rows(p, epilogue, m_begin, m_end);
}

}  // namespace tcgemm

#include "dispatch/dispatch.h"

#include <stdexcept>

#include "dispatch/heuristics.h"
#include "epilogue/int32_epilogue_fill.h"
#include "kernels/cpu/cpu_int8_gemm.h"
#include "kernels/sm80/sm80_int8_gemm.h"
#include "kernels/sm90/sm90_int8_gemm.h"
#include "kernels/skinny/skinny_gemm.h"
#include "kernels/sm90/sm90_tensor_map.h"
#include "kernels/wmma/wmma_int8_gemm.h"

namespace tcgemm {
namespace {

constexpr Backend kAllBackends[] = {Backend::kAuto, Backend::kCpu,  Backend::kWmma,  Backend::kWmmaSimple,
                                    Backend::kSm80, Backend::kSm90, Backend::kSkinny};

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// K-major with 16-byte aligned rows: what cp.async and 16-byte vector loads need.
bool k_major_aligned(const Operand& op) {
  return op.k_major() && op.stride_row % 16 == 0 && aligned16(op.ptr);
}

bool rows_contiguous_aligned(const Operand& op) {
  return op.rows_contiguous() && op.stride_k % 16 == 0 && aligned16(op.ptr);
}

}  // namespace

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto: return "auto";
    case Backend::kCpu: return "cpu";
    case Backend::kWmma: return "wmma";
    case Backend::kWmmaSimple: return "wmma_simple";
    case Backend::kSm80: return "sm80";
    case Backend::kSm90: return "sm90";
    case Backend::kSkinny: return "skinny";
  }
  return "?";
}

std::optional<Backend> parse_backend(std::string_view name) {
  for (Backend b : kAllBackends)
    if (name == backend_name(b)) return b;
  return std::nullopt;
}

std::string backend_choices() {
  std::string s;
  for (Backend b : kAllBackends) s += (s.empty() ? "" : ", ") + std::string(backend_name(b));
  return s;
}

bool sm90_kernels_available() { return sm90::kernel_available(); }

std::vector<Backend> gpu_backends(const DeviceInfo& dev) {
  std::vector<Backend> out;
  if (dev.sm90_kernels) out.push_back(Backend::kSm90);
  if (dev.major >= 8) out.push_back(Backend::kSm80);
  if (dev.major * 10 + dev.minor >= 75) {  // the oldest architecture the package is built for
    out.push_back(Backend::kWmma);
    out.push_back(Backend::kWmmaSimple);
  }
  if (dev.major >= 8) out.push_back(Backend::kSkinny);  // few-row problems; auto reaches it through sm80/sm90
  return out;
}

std::string resolve_gpu_backend(Backend requested, const DeviceInfo& dev, Backend* out) {
  const std::vector<Backend> usable = gpu_backends(dev);
  const std::string cc = std::to_string(dev.major) + "." + std::to_string(dev.minor);
  if (requested == Backend::kAuto) {
    if (usable.empty()) return "no tensor-core backend supports compute capability " + cc + " (needs >= 7.5)";
    *out = usable.front();
    return "";
  }
  if (requested == Backend::kCpu) return "backend 'cpu' needs CPU tensors";
  for (Backend b : usable) {
    if (b == requested) {
      *out = b;
      return "";
    }
  }
  if (requested == Backend::kSm90) {
    if (dev.major == 9 && dev.minor == 0)
      return "backend 'sm90' needs sm_90a kernels, and this build has none (rebuild with TORCH_CUDA_ARCH_LIST "
             "including 9.0a)";
    return "backend 'sm90' needs compute capability 9.0 (sm_90a), but this GPU has " + cc;
  }
  const char* need = requested == Backend::kSm80 || requested == Backend::kSkinny ? "8.0" : "7.5";
  return std::string("backend '") + backend_name(requested) + "' needs compute capability >= " + need +
         ", but this GPU has " + cc;
}

bool operand_fits(Backend b, const Operand& op, int64_t rows, int64_t k) {
  switch (b) {
    case Backend::kSm90: return sm90::tma_describable(op, rows, k);
    case Backend::kSm80:
    case Backend::kSkinny: return k_major_aligned(op);
    case Backend::kWmma: return k_major_aligned(op) || rows_contiguous_aligned(op);
    default: return true;  // the WMMA fallback and the CPU path read any strides
  }
}

bool needs_row_offset(Backend b, const GemmParams& p) {
  return (b == Backend::kWmma || b == Backend::kWmmaSimple) &&
         wmma_gemm::sign_flip_for(p.a.is_signed, p.b.is_signed) == wmma_gemm::SignFlip::kFlipB;
}

bool needs_col_offset(Backend b, const GemmParams& p) {
  return (b == Backend::kWmma || b == Backend::kWmmaSimple) &&
         wmma_gemm::sign_flip_for(p.a.is_signed, p.b.is_signed) == wmma_gemm::SignFlip::kFlipA;
}

namespace {

void run_skinny(const GemmParams& p, const DeviceInfo& dev) {
  switch (choose_skinny_tile(p.m, p.n, dev.sm_count)) {
    case SkinnyTile::kRows16Cols16: return skinny::launch_skinny_int8_gemm<1, 2>(p);
    case SkinnyTile::kRows16Cols32: return skinny::launch_skinny_int8_gemm<1, 4>(p);
    case SkinnyTile::kRows32Cols16: return skinny::launch_skinny_int8_gemm<2, 2>(p);
  }
}

void run_sm80(GemmParams p, const DeviceInfo& dev) {
  if (choose_skinny(p.m, p.n, p.k, dev.sm_count, /*vs_sm90=*/false)) return run_skinny(p, dev);
  const Sm80Tile tile = choose_sm80_tile(p.m, p.n, dev.sm_count, dev.smem_optin);
  p.split_k = choose_sm80_split_k(tile, p.m, p.n, p.k, dev.sm_count);
  if (p.split_k > 1) launch_epilogue_fill(p);  // the splits add their scaled partial sums onto it
  switch (tile) {
    case Sm80Tile::kLarge: return sm80::launch_sm80_int8_gemm<Sm80Large>(p);
    case Sm80Tile::kSmall: return sm80::launch_sm80_int8_gemm<Sm80Small>(p);
  }
}

void run_sm90(GemmParams p, const DeviceInfo& dev) {
  if (choose_skinny(p.m, p.n, p.k, dev.sm_count, /*vs_sm90=*/true)) return run_skinny(p, dev);
  const Sm90Plan plan = choose_sm90_plan(p.m, p.n, p.k, dev.sm_count);
  p.split_k = plan.split_k;
  if (p.split_k > 1) launch_epilogue_fill(p);  // the splits add their scaled partial sums onto it
  switch (plan.tile) {
    case Sm90Tile::kLarge: return sm90::launch_sm90_int8_gemm<Sm90Large>(p, dev.sm_count);
    case Sm90Tile::kPingPong: return sm90::launch_sm90_int8_gemm<Sm90PingPong>(p, dev.sm_count);
    case Sm90Tile::kSmall: return sm90::launch_sm90_int8_gemm<Sm90Small>(p, dev.sm_count);
    case Sm90Tile::kTiny: return sm90::launch_sm90_int8_gemm<Sm90Tiny>(p, dev.sm_count);
    case Sm90Tile::kBlock: break;  // per-block scales only
  }
  throw std::logic_error("tcgemm: choose_sm90_plan picked a per-block-only config");
}

}  // namespace

void run_gpu_gemm(Backend b, const GemmParams& p, const DeviceInfo& dev) {
  if (p.k == 0) return launch_epilogue_fill(p);  // A @ B is all zeros: no GEMM kernel needed
  switch (b) {
    case Backend::kWmma:
      // The classic design's fallback: one warp per tile when the device lacks the tiled kernel's smem.
      if (dev.smem_optin >= WmmaConfig::kSmemBytes) return wmma_gemm::launch_wmma_int8_gemm(p, dev.sm_count);
      return wmma_gemm::launch_wmma_int8_gemm_simple(p, dev.sm_count);
    case Backend::kWmmaSimple: return wmma_gemm::launch_wmma_int8_gemm_simple(p, dev.sm_count);
    case Backend::kSm80: return run_sm80(p, dev);
    case Backend::kSm90: return run_sm90(p, dev);
    case Backend::kSkinny: return run_skinny(p, dev);
    default:
      throw std::logic_error(std::string("tcgemm: run_gpu_gemm got non-GPU backend ") + backend_name(b));
  }
}

void run_cpu_gemm(const GemmParams& p, int64_t m_begin, int64_t m_end) { cpu::int8_gemm_rows(p, m_begin, m_end); }

namespace {

// The sm90 kernel promotes per-block scales once per warpgroup piece of <= 128 columns, so a
// weight scale that depends on K must be one per 128 columns (or it must not depend on K).
bool sm90_takes_scales(const ScaledEpilogueParams& s) {
  return !s.per_block() || s.sb_stride_kb == 0 || s.sb_n_shift == 7;
}

}  // namespace

std::string resolve_scaled_gpu_backend(Backend requested, const DeviceInfo& dev, const GemmParams& p, Backend* out) {
  const std::string cc = std::to_string(dev.major) + "." + std::to_string(dev.minor);
  const bool sm90 = dev.sm90_kernels && sm90_takes_scales(p.scaled);
  const bool sm80 = dev.major >= 8;
  switch (requested) {
    case Backend::kAuto:
      if (sm90) {
        *out = Backend::kSm90;
      } else if (sm80) {
        *out = Backend::kSm80;
      } else {
        return "the scaled GEMM needs compute capability >= 8.0 (backends sm90, sm80), but this GPU has " + cc;
      }
      return "";
    case Backend::kSm90:
      if (!dev.sm90_kernels) {
        Backend ignored;
        return resolve_gpu_backend(Backend::kSm90, dev, &ignored);  // says why sm90 is missing
      }
      if (!sm90_takes_scales(p.scaled))
        return "backend 'sm90' takes per-block weight scales of 128x128 blocks ([ceil(N/128), ceil(K/128)]) but "
               "not one per column and K block ([N, ceil(K/128)]); use backend 'sm80' or 'auto'";
      *out = Backend::kSm90;
      return "";
    case Backend::kSm80:
    case Backend::kSkinny:
      if (!sm80) return std::string("backend '") + backend_name(requested) + "' needs compute capability >= 8.0, but this GPU has " + cc;
      *out = requested;
      return "";
    case Backend::kCpu: return "backend 'cpu' needs CPU tensors";
    default:
      return std::string("the scaled GEMM runs on backends auto, cpu, sm80, sm90 and skinny, not '") +
             backend_name(requested) + "'";
  }
}

namespace {

void run_skinny_scaled(const GemmParams& p, const DeviceInfo& dev) {
  switch (choose_skinny_tile(p.m, p.n, dev.sm_count)) {
    case SkinnyTile::kRows16Cols16: return skinny::launch_skinny_scaled_gemm<1, 2>(p);
    case SkinnyTile::kRows16Cols32: return skinny::launch_skinny_scaled_gemm<1, 4>(p);
    case SkinnyTile::kRows32Cols16: return skinny::launch_skinny_scaled_gemm<2, 2>(p);
  }
}

void run_sm80_scaled(GemmParams p, const DeviceInfo& dev) {
  p.split_k = 1;
  if (choose_skinny(p.m, p.n, p.k, dev.sm_count, /*vs_sm90=*/false)) return run_skinny_scaled(p, dev);
  const Sm80Tile tile = choose_sm80_tile(p.m, p.n, dev.sm_count, dev.smem_optin);
  if (p.scaled.per_block()) {
    if (tile == Sm80Tile::kLarge) return sm80::launch_sm80_scaled_gemm<Sm80Block, true>(p);
    return sm80::launch_sm80_scaled_gemm<Sm80Small, true>(p);
  }
  if (tile == Sm80Tile::kLarge) return sm80::launch_sm80_scaled_gemm<Sm80Large, false>(p);
  return sm80::launch_sm80_scaled_gemm<Sm80Small, false>(p);
}

void run_sm90_scaled(GemmParams p, const DeviceInfo& dev) {
  p.split_k = 1;
  if (choose_skinny(p.m, p.n, p.k, dev.sm_count, /*vs_sm90=*/true)) return run_skinny_scaled(p, dev);
  if (p.scaled.per_block()) {
    switch (choose_sm90_block_plan(p.m, p.n, p.k, dev.sm_count).tile) {
      case Sm90Tile::kSmall: return sm90::launch_sm90_scaled_gemm<Sm90Small, true>(p, dev.sm_count);
      case Sm90Tile::kTiny: return sm90::launch_sm90_scaled_gemm<Sm90Tiny, true>(p, dev.sm_count);
      default: return sm90::launch_sm90_scaled_gemm<Sm90Block, true>(p, dev.sm_count);
    }
  }
  switch (choose_sm90_plan(p.m, p.n, p.k, dev.sm_count, /*allow_split=*/false).tile) {
    case Sm90Tile::kPingPong: return sm90::launch_sm90_scaled_gemm<Sm90PingPong, false>(p, dev.sm_count);
    case Sm90Tile::kSmall: return sm90::launch_sm90_scaled_gemm<Sm90Small, false>(p, dev.sm_count);
    case Sm90Tile::kTiny: return sm90::launch_sm90_scaled_gemm<Sm90Tiny, false>(p, dev.sm_count);
    default: return sm90::launch_sm90_scaled_gemm<Sm90Large, false>(p, dev.sm_count);
  }
}

}  // namespace

void run_gpu_scaled_gemm(Backend b, const GemmParams& p, const DeviceInfo& dev) {
  switch (b) {
    case Backend::kSm80: return run_sm80_scaled(p, dev);
    case Backend::kSm90: return run_sm90_scaled(p, dev);
    case Backend::kSkinny: return run_skinny_scaled(p, dev);
    default:
      throw std::logic_error(std::string("tcgemm: run_gpu_scaled_gemm got backend ") + backend_name(b));
  }
}

void run_cpu_scaled_gemm(const GemmParams& p, float* out, int64_t m_begin, int64_t m_end) {
  cpu::scaled_gemm_rows(p, out, m_begin, m_end);
}

}  // namespace tcgemm

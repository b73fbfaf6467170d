#include "dispatch/backends.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/sm90/sm90_gemm.h"
#include "kernels/sm90/sm90_tensor_map.h"
#include "kernels/wmma/wmma_gemm.h"

namespace tcgemm {
namespace {

// What a backend reads in place (anything else gets a K-major copy).
enum class Layouts { kAny, kKMajor, kKMajorOrRows, kTma };

struct BackendCaps {
  Backend id;
  const char* name;
  int min_cc;          // compute capability as major * 10 + minor; 0 for the CPU
  bool needs_sm90a;    // sm_90a machine code, which runs on compute capability 9.0 only
  bool auto_pick;      // "auto" may pick it directly (skinny is reached through sm80/sm90's plans)
  int preference;      // GPU backends: lower is tried first (gpu_backends, auto); 0 otherwise
  unsigned epilogues;  // kEpi* families it runs
  Layouts layouts;
};

constexpr unsigned kEpiAll = kEpiInt32 | kEpiScaled | kEpiPerBlock;

// In the order of tcgemm.BACKENDS (backend_choices, error messages).
constexpr BackendCaps kBackends[] = {
    {Backend::kAuto, "auto", 0, false, false, 0, kEpiAll, Layouts::kAny},
    {Backend::kCpu, "cpu", 0, false, false, 0, kEpiAll, Layouts::kAny},
    {Backend::kWmma, "wmma", 75, false, true, 3, kEpiInt32, Layouts::kKMajorOrRows},
    {Backend::kWmmaSimple, "wmma_simple", 75, false, false, 4, kEpiInt32, Layouts::kAny},
    {Backend::kSm80, "sm80", 80, false, true, 2, kEpiAll, Layouts::kKMajor},
    {Backend::kSm90, "sm90", 90, true, true, 1, kEpiAll, Layouts::kTma},
    {Backend::kSkinny, "skinny", 80, false, false, 5, kEpiAll, Layouts::kKMajor},
};

const BackendCaps& caps(Backend b) {
  for (const BackendCaps& c : kBackends)
    if (c.id == b) return c;
  return kBackends[0];
}

constexpr bool is_gpu(const BackendCaps& c) { return c.min_cc > 0; }

// Each GPU backend has its own rank.
constexpr bool gpu_preferences_distinct() {
  for (const BackendCaps& x : kBackends)
    for (const BackendCaps& y : kBackends)
      if (&x != &y && is_gpu(x) && is_gpu(y) && x.preference == y.preference) return false;
  return true;
}
static_assert(gpu_preferences_distinct(), "two GPU backends share a preference rank");

// The GPU rows, best first.
const std::vector<const BackendCaps*>& gpu_rows_by_preference() {
  static const std::vector<const BackendCaps*> rows = [] {
    std::vector<const BackendCaps*> r;
    for (const BackendCaps& c : kBackends)
      if (is_gpu(c)) r.push_back(&c);
    std::sort(r.begin(), r.end(),
              [](const BackendCaps* x, const BackendCaps* y) { return x->preference < y->preference; });
    return r;
  }();
  return rows;
}

bool runs_on(const BackendCaps& c, const DeviceInfo& dev) {
  if (c.needs_sm90a) return dev.sm90_kernels;
  return dev.major * 10 + dev.minor >= c.min_cc;
}

std::string cc_string(int cc) { return std::to_string(cc / 10) + "." + std::to_string(cc % 10); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// K-major with 16-byte aligned rows: what cp.async and 16-byte vector loads need.
bool k_major_aligned(const Operand& op) { return op.k_major() && op.stride_row % 16 == 0 && aligned16(op.ptr); }

bool rows_contiguous_aligned(const Operand& op) {
  return op.rows_contiguous() && op.stride_k % 16 == 0 && aligned16(op.ptr);
}

}  // namespace

const char* backend_name(Backend b) { return caps(b).name; }

std::optional<Backend> parse_backend(std::string_view name) {
  for (const BackendCaps& c : kBackends)
    if (name == c.name) return c.id;
  return std::nullopt;
}

std::string backend_choices() {
  std::string s;
  for (const BackendCaps& c : kBackends) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

bool sm90_kernels_available() { return sm90::kernel_available(); }

std::vector<Backend> gpu_backends(const DeviceInfo& dev) {
  std::vector<Backend> out;
  for (const BackendCaps* c : gpu_rows_by_preference())
    if (runs_on(*c, dev)) out.push_back(c->id);
  return out;
}

std::string resolve_gpu_backend(Backend requested, const DeviceInfo& dev, const EpilogueArgs& epilogue, Backend* out) {
  const unsigned family = epilogue_family_of(epilogue);
  const bool scaled = family != kEpiInt32;
  const int device_cc = dev.major * 10 + dev.minor;
  if (requested == Backend::kAuto) {
    int least_cc = 1000;
    std::string names;
    for (const BackendCaps* c : gpu_rows_by_preference()) {
      if (!c->auto_pick || !(c->epilogues & family)) continue;
      if (runs_on(*c, dev)) {
        *out = c->id;
        return "";
      }
      least_cc = std::min(least_cc, c->min_cc);
      names += (names.empty() ? "" : ", ") + std::string(c->name);
    }
    if (scaled)
      return "the scaled GEMM needs compute capability >= " + cc_string(least_cc) + " (backends " + names +
             "), but this GPU has " + cc_string(device_cc);
    return "no tensor-core backend supports compute capability " + cc_string(device_cc) + " (needs >= " +
           cc_string(least_cc) + ")";
  }
  const BackendCaps& c = caps(requested);
  if (requested == Backend::kCpu) return "backend 'cpu' needs CPU tensors";
  if (!(c.epilogues & family)) {
    std::vector<const char*> names;
    for (const BackendCaps& other : kBackends)
      if (other.epilogues & family) names.push_back(other.name);
    std::string list;
    for (size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
    return "the scaled GEMM runs on backends " + list + ", not '" + c.name + "'";
  }
  if (!runs_on(c, dev)) {
    if (c.needs_sm90a) {
      if (device_cc == c.min_cc)
        return std::string("backend '") + c.name + "' needs sm_90a kernels, and this build has none (rebuild with "
               "TORCH_CUDA_ARCH_LIST including 9.0a)";
      return std::string("backend '") + c.name + "' needs compute capability 9.0 (sm_90a), but this GPU has " +
             cc_string(device_cc);
    }
    return std::string("backend '") + c.name + "' needs compute capability >= " + cc_string(c.min_cc) +
           ", but this GPU has " + cc_string(device_cc);
  }
  *out = requested;
  return "";
}

bool operand_fits(Backend b, const Operand& op, int64_t rows, int64_t k) {
  switch (caps(b).layouts) {
    case Layouts::kTma: return sm90::tma_describable(op, rows, k);
    case Layouts::kKMajor: return k_major_aligned(op);
    case Layouts::kKMajorOrRows: return k_major_aligned(op) || rows_contiguous_aligned(op);
    case Layouts::kAny: return true;
  }
  return true;
}

std::string backend_epilogue_table() {
  std::string s;
  for (const BackendCaps& c : kBackends) {
    std::string families;
    for (const EpilogueFamilyName& f : kEpilogueFamilyNames)
      if (c.epilogues & f.family) families += (families.empty() ? "" : "+") + std::string(f.name);
    s += (s.empty() ? "" : ",") + std::string(c.name) + "=" + families;
  }
  return s;
}

bool needs_row_offset(Backend b, const GemmProblem& p) {
  return (b == Backend::kWmma || b == Backend::kWmmaSimple) &&
         wmma_gemm::sign_flip_for(p.a.is_signed, p.b.is_signed) == wmma_gemm::SignFlip::kFlipB;
}

bool needs_col_offset(Backend b, const GemmProblem& p) {
  return (b == Backend::kWmma || b == Backend::kWmmaSimple) &&
         wmma_gemm::sign_flip_for(p.a.is_signed, p.b.is_signed) == wmma_gemm::SignFlip::kFlipA;
}

}  // namespace tcgemm

// Backends: their names, what each needs and runs (one capability table), and the one resolve
// that turns a requested backend into a usable one for a device, problem and epilogue.
// Torch-free: the binding layer describes the device and the problem with plain structs.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/problem.h"
#include "dispatch/plan.h"
#include "epilogue/epilogues.h"

namespace tcgemm {

enum class Backend { kAuto, kCpu, kWmma, kWmmaSimple, kSm80, kSm90, kSkinny };

const char* backend_name(Backend b);
std::optional<Backend> parse_backend(std::string_view name);
std::string backend_choices();  // "auto, cpu, ..." for error messages and tcgemm.BACKENDS

struct DeviceInfo {
  int major = 0, minor = 0;
  int sm_count = 0;
  int smem_optin = 0;         // largest dynamic shared memory a block may ask for, bytes
  bool sm90_kernels = false;  // this build's sm_90a kernels run on the device (sm90::kernel_available)
  W4Residency w4_resident;    // where sm90_kernels: what the W4 kernel's configs fit at once (launch.h)
};

// Whether the device runs programmatic dependent launches (ptx/griddep.cuh): compute
// capability >= 9.0.
inline bool has_pdl(const DeviceInfo& dev) { return dev.major >= 9; }

// Whether the sm90 kernels of this build run on the current CUDA device (fills DeviceInfo).
bool sm90_kernels_available();

// GPU backends this device can run, best first.
std::vector<Backend> gpu_backends(const DeviceInfo& dev);

// Resolves kAuto to the best backend that runs this epilogue on the device, or checks a forced
// one; returns an empty string when *out is usable, else a sentence saying why not.
std::string resolve_gpu_backend(Backend requested, const DeviceInfo& dev, const EpilogueArgs& epilogue, Backend* out);

// For every backend in the order of tcgemm.BACKENDS, "name=family+family+..." with the epilogue
// families it runs (kEpilogueFamilyNames), comma-separated: "auto=int32+scaled+per_block,...".
std::string backend_epilogue_table();

// The operand layouts a backend reads directly ([rows, K] view); anything else the binding layer
// copies into a K-major buffer whose rows are padded to 16 bytes.
bool operand_fits(Backend b, const Operand& op, int64_t rows, int64_t k);

// Whether this backend adds 128 * (row sums of A) or 128 * (column sums of B) to fix up a
// flipped operand (mixed int8 x uint8 on WMMA); see kernels/wmma.
bool needs_row_offset(Backend b, const GemmProblem& p);
bool needs_col_offset(Backend b, const GemmProblem& p);

}  // namespace tcgemm

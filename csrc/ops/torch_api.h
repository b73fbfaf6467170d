// The binding layer's whole view of torch: the LibTorch stable ABI (torch/csrc/stable,
// torch/headeronly and the C shim), nothing of ATen or c10. One built library then loads under
// every torch release from the one setup.py targets (TORCH_TARGET_VERSION) on. This header is the
// only one in csrc/ that includes torch; kernels and dispatch never see it.
//
// What the ops need of a tensor beyond torch::stable::Tensor's accessors is here: messages and
// errors that name the argument, allocation, views, copies and the current CUDA stream. The hot
// paths (every call at decode) use the C shim's direct calls; the stable headers' ops, which look
// their ATen op up by name on each call, only serve the rare paths.
#pragma once

#ifndef TORCH_TARGET_VERSION
#error "TORCH_TARGET_VERSION must be defined (setup.py defines it: the oldest torch the build loads under)"
#endif
#ifndef USE_CUDA
#define USE_CUDA  // the C shim's CUDA stream accessor
#endif
#include <cuda_runtime_api.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tcgemm {

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;

// A shape (or strides) of up to kMaxDims dimensions, held inline: a decode step's ops build a few
// and each heap allocation is host time.
class Sizes {
 public:
  static constexpr int64_t kMaxDims = 8;
  Sizes() = default;
  Sizes(std::initializer_list<int64_t> v) : Sizes(v.begin(), v.end()) {}
  Sizes(const int64_t* begin, const int64_t* end) : n_(end - begin) {
    if (n_ > kMaxDims) too_many_dims(n_);
    std::copy(begin, end, v_);
  }
  int64_t size() const { return n_; }
  const int64_t* data() const { return v_; }
  const int64_t* begin() const { return v_; }
  const int64_t* end() const { return v_ + n_; }
  int64_t operator[](int64_t i) const { return v_[i]; }
  int64_t& back() { return v_[n_ - 1]; }

 private:
  [[noreturn]] static void too_many_dims(int64_t n);
  int64_t v_[kMaxDims] = {};
  int64_t n_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Messages and errors.

// Messages format numbers with std::to_string, never through an ostream: with some toolchain
// pairings (seen: g++ 13 building against torch 2.11) the extension's own instantiation of
// ostream's integer insertion picks the wrong locale facet and crashes.
inline std::string num(int64_t v) { return std::to_string(v); }
std::string num_float(double v);

namespace detail {
inline void append(std::string& s, std::string_view v) { s += v; }
inline void append(std::string& s, const char* v) { s += v; }
inline void append(std::string& s, const std::string& v) { s += v; }
}  // namespace detail

// The pieces of a message (strings), joined.
template <class... P>
std::string cat(const P&... p) {
  std::string s;
  (detail::append(s, p), ...);
  return s;
}

// What a failed check means to Python. The stable ABI carries every C++ exception to Python as a
// RuntimeError with its message; tcgemm's Python API gives the ValueError or TypeError back by
// asking tcgemm._C.error_kind(message), which is last_error_kind(message) on the thread the op
// failed on.
enum class ErrorKind : int { kNone = 0, kValue = 1, kType = 2, kInternal = 3 };
[[noreturn]] void raise_error(ErrorKind kind, std::string message);
// The kind of the last error raise_error threw on this thread if its message is `message`, else
// kNone.
ErrorKind last_error_kind(std::string_view message);

}  // namespace tcgemm

// A bad argument's value or shape (Python ValueError), its type (TypeError), or a broken invariant
// of tcgemm itself (RuntimeError). The message pieces are strings (num() for numbers).
#define TCGEMM_CHECK_VALUE(cond, ...)                                                            \
  do {                                                                                           \
    if (!(cond)) ::tcgemm::raise_error(::tcgemm::ErrorKind::kValue, ::tcgemm::cat(__VA_ARGS__)); \
  } while (0)
#define TCGEMM_CHECK_TYPE(cond, ...)                                                            \
  do {                                                                                          \
    if (!(cond)) ::tcgemm::raise_error(::tcgemm::ErrorKind::kType, ::tcgemm::cat(__VA_ARGS__)); \
  } while (0)
#define TCGEMM_CHECK_INTERNAL(cond, ...)                                                            \
  do {                                                                                              \
    if (!(cond)) ::tcgemm::raise_error(::tcgemm::ErrorKind::kInternal, ::tcgemm::cat(__VA_ARGS__)); \
  } while (0)

namespace tcgemm {

// ---------------------------------------------------------------------------------------------
// Describing tensors in messages.

std::string shape_str(const Tensor& t);    // "[2, 3]"
std::string strides_str(const Tensor& t);  // "[3, 1]"
std::string shape_str(const Sizes& sizes);
std::string dtype_name(ScalarType t);     // "torch.int8", as Python prints it
std::string device_str(const Tensor& t);  // "cpu", "cuda:0", as Python prints it
bool is_floating(ScalarType t);

// ---------------------------------------------------------------------------------------------
// Metadata.

// The element type and device of a tensor, each one C shim call (torch::stable::Tensor's
// scalar_type() and is_cuda() ask the shim again for every dtype or device code they compare
// with: up to 13 calls for a bfloat16 tensor).
ScalarType dtype_of(const Tensor& t);
bool is_cuda(const Tensor& t);
bool is_cpu(const Tensor& t);
bool same_device(const Tensor& a, const Tensor& b);
Sizes sizes_of(const Tensor& t);
bool sizes_equal(const Tensor& t, const Sizes& sizes);

template <class T>
T* data(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
template <class T>
const T* const_data(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}

// Whether a and b share memory (at::Tensor::is_alias_of: the same storage).
bool is_alias_of(const Tensor& a, const Tensor& b);
// Yes: some element is reached twice (a zero stride over a size > 1); No: provably not (dense in
// some order); otherwise TooHard (at::has_internal_overlap's three answers, torch's
// _debug_has_internal_overlap in Python: 0, 1, 2).
enum class Overlap { kNo, kYes, kTooHard };
Overlap internal_overlap(const Tensor& t);

// ---------------------------------------------------------------------------------------------
// New tensors and views (the C shim's direct calls).

// A new contiguous tensor of `sizes` and `dtype` on the device of `like`.
Tensor empty(const Sizes& sizes, ScalarType dtype, const Tensor& like);
// A view of t's memory with other sizes and strides, starting `offset` elements after t's start.
Tensor view_as_strided(const Tensor& t, const Sizes& sizes, const Sizes& strides, int64_t offset = 0);
// The transpose of a 2-D tensor (a view).
Tensor transposed(const Tensor& t);
// Columns [0, cols) of a 2-D tensor (a view).
Tensor first_cols(const Tensor& t, int64_t cols);
// dst <- src (src broadcast to dst's shape and converted to its dtype), as Tensor.copy_.
void copy_into(const Tensor& dst, const Tensor& src);
void zero(const Tensor& t);
void fill(const Tensor& t, double value);
// t itself when contiguous, else a contiguous copy.
Tensor as_contiguous(const Tensor& t);
// A contiguous copy of t, always (a new tensor even where t is contiguous: Tensor.clone with
// torch.contiguous_format).
Tensor contiguous_clone(const Tensor& t);
// t viewed (or copied, where its strides do not allow a view) as [rows, cols].
Tensor reshape(const Tensor& t, int64_t rows, int64_t cols);
// t converted to fp32, contiguous (t itself when it already is).
Tensor float_contiguous(const Tensor& t);
// sum over dimension `dim` of a 2-D integer tensor, as int32 (Tensor.sum(dim, dtype=torch.int32)).
Tensor sum_int32(const Tensor& t, int64_t dim);
// (sum over `dim` of t, as int64) * 128, as int32: the uint8 operands' offset sums (gemm.cpp).
Tensor sum_times_128_int32(const Tensor& t, int64_t dim);
// [lowest, highest] value of a non-empty CPU int8 tensor.
std::pair<int64_t, int64_t> int8_range_cpu(const Tensor& t);

// ---------------------------------------------------------------------------------------------
// CUDA.

int cuda_device_count();
// The current CUDA stream of device `index` (torch's, which CUDA graphs capture).
cudaStream_t current_cuda_stream(int32_t index);

// The current CUDA device set to `index` for the scope, and back after (torch's device guard,
// taken only where the current device is another).
class CudaDeviceScope {
 public:
  explicit CudaDeviceScope(int32_t index);

 private:
  std::optional<torch::stable::accelerator::DeviceGuard> guard_;
};

}  // namespace tcgemm

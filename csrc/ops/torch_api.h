// The binding layer's whole view of torch: the LibTorch stable ABI (torch/csrc/stable,
// torch/headeronly and the C shim), nothing of ATen or c10. One built library then loads under
// every torch release from the one setup.py targets (TORCH_TARGET_VERSION) on. This header is the
// only one in csrc/ that includes torch; kernels and dispatch never see it.
//
// What the ops need of torch is here: a tensor's handle and metadata, messages and errors that
// name the argument, allocation, views, copies, the current CUDA stream and kernel registration. The hot
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
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace tcgemm {

using ScalarType = torch::headeronly::ScalarType;
using Library = torch::stable::detail::StableLibrary;  // what STABLE_TORCH_LIBRARY_IMPL's m is

// A tensor as the ops see it: an owned C shim handle and the metadata the checks read, fetched
// from torch once (six shim calls) on first use and then read inline. torch::stable::Tensor would
// do: it calls the shim for every size, stride and dtype asked, and holds its handle through a
// shared_ptr (a heap allocation per argument of every call). Copies are new handles to the same
// tensor; the metadata stays valid while the handle lives (the ops never resize a tensor).
class Tensor {
 public:
  explicit Tensor(AtenTensorHandle h) : h_(h) {}  // takes ownership
  Tensor(const Tensor& other);
  Tensor(Tensor&& other) noexcept : h_(other.h_), m_(other.m_) { other.h_ = nullptr; }
  Tensor& operator=(const Tensor& other);
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor() { reset(); }

  AtenTensorHandle get() const { return h_; }
  // The handle, no longer owned (a returned tensor goes to torch's stack this way).
  AtenTensorHandle release() {
    AtenTensorHandle h = h_;
    h_ = nullptr;
    return h;
  }

  int64_t dim() const { return meta().dim; }
  int64_t size(int64_t d) const { return meta().sizes[d]; }
  int64_t stride(int64_t d) const { return meta().strides[d]; }
  const int64_t* sizes_data() const { return meta().sizes; }
  const int64_t* strides_data() const { return meta().strides; }
  int64_t numel() const;
  int32_t dtype_code() const { return meta().dtype; }
  int32_t device_type() const { return meta().device_type; }
  int32_t get_device_index() const { return meta().device_index; }
  void* data_ptr() const;
  bool is_contiguous() const;
  int64_t storage_offset() const;
  int64_t element_size() const;

 private:
  struct Meta {
    bool read = false;
    int64_t dim = 0;
    const int64_t* sizes = nullptr;
    const int64_t* strides = nullptr;
    int32_t dtype = 0, device_type = 0, device_index = 0;
  };
  const Meta& meta() const {
    if (!m_.read) read_meta();
    return m_;
  }
  void read_meta() const;
  void reset();

  AtenTensorHandle h_ = nullptr;
  mutable Meta m_;
};

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

// The element type and device of a tensor, from its metadata.
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
// t itself when contiguous, else a contiguous copy held in `copy`: no new handle for the usual case.
const Tensor& dense(const Tensor& t, std::optional<Tensor>& copy);
// A contiguous copy of t, always (a new tensor even where t is contiguous: Tensor.clone with
// torch.contiguous_format).
Tensor contiguous_clone(const Tensor& t);
// t viewed (or copied, where its strides do not allow a view) as [rows, cols].
Tensor reshape(const Tensor& t, int64_t rows, int64_t cols);
// t itself when fp32 and contiguous, else an fp32 contiguous copy held in `copy` (as dense()).
const Tensor& float_dense(const Tensor& t, std::optional<Tensor>& copy);
// sum over dimension `dim` of a 2-D integer tensor, as int32 (Tensor.sum(dim, dtype=torch.int32)).
Tensor sum_int32(const Tensor& t, int64_t dim);
// (sum over `dim` of t, as int64) * 128, as int32: the uint8 operands' offset sums (gemm.cpp).
Tensor sum_times_128_int32(const Tensor& t, int64_t dim);
// [lowest, highest] value of a non-empty CPU int8 tensor.
std::pair<int64_t, int64_t> int8_range_cpu(const Tensor& t);

// ---------------------------------------------------------------------------------------------
// Registering kernels.

namespace detail {
// An argument taken from torch's stack: the stable ABI's own conversion, except that a tensor
// (or an optional one) is taken as tcgemm::Tensor, owning the handle torch made for the call.
template <class T>
struct Unbox {
  static T take(StableIValue v) { return torch::stable::detail::to<T>(v); }
};
template <>
struct Unbox<Tensor> {
  static Tensor take(StableIValue v) { return Tensor(torch::stable::detail::to<AtenTensorHandle>(v)); }
};
template <>
struct Unbox<std::optional<Tensor>> {
  static std::optional<Tensor> take(StableIValue v) {
    StableIValue* inner = torch::stable::detail::to<StableIValue*>(v);  // null for None
    if (inner == nullptr) return std::nullopt;
    Tensor t = Unbox<Tensor>::take(*inner);
    delete inner;
    return t;
  }
};

// A string argument, copied out of torch's string handle, which is then deleted. The stable
// headers' own conversion of torch 2.11 leaves a heap copy of every string argument behind (a leak
// on every call); this one never allocates for the short words the ops take.
template <>
struct Unbox<std::string> {
  static std::string take(StableIValue v);
};

// A result put on the stack: a tensor's handle itself (no new handle).
inline StableIValue box(Tensor t) { return torch::stable::detail::from(t.release()); }

void check_arity(uint64_t num_args, uint64_t expected_args, uint64_t num_outputs, uint64_t expected_outputs);

template <class F>
struct Boxer;
template <class R, class... A>
struct Boxer<R (*)(A...)> {
  template <R (*fn)(A...)>
  static void call(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    check_arity(num_args, sizeof...(A), num_outputs, outputs());
    call_impl<fn>(stack, std::index_sequence_for<A...>());
  }

 private:
  static constexpr uint64_t outputs() {
    if constexpr (std::is_void_v<R>) {
      return 0;
    } else if constexpr (is_tuple<R>::value) {
      return std::tuple_size_v<R>;
    } else {
      return 1;
    }
  }
  template <class T>
  struct is_tuple : std::false_type {};
  template <class... T>
  struct is_tuple<std::tuple<T...>> : std::true_type {};

  template <R (*fn)(A...), size_t... I>
  static void call_impl(StableIValue* stack, std::index_sequence<I...>) {
    // The arguments live until the call returns: taken first, left to right.
    std::tuple<std::decay_t<A>...> args{Unbox<std::decay_t<A>>::take(stack[I])...};
    if constexpr (std::is_void_v<R>) {
      fn(std::get<I>(args)...);
    } else if constexpr (is_tuple<R>::value) {
      put_tuple(stack, fn(std::get<I>(args)...), std::make_index_sequence<std::tuple_size_v<R>>());
    } else {
      stack[0] = box(fn(std::get<I>(args)...));
    }
  }
  template <class T, size_t... J>
  static void put_tuple(StableIValue* stack, T result, std::index_sequence<J...>) {
    ((stack[J] = box(std::move(std::get<J>(result)))), ...);
  }
};

}  // namespace detail

}  // namespace tcgemm

// The kernels of one file registered for the CPU and the CUDA dispatch keys alike (every kernel
// serves both devices and dispatches on its tensors' device itself): `register_kernels(m)` makes
// the m.impl calls, for each key.
#define TCGEMM_IMPL_CPU_AND_CUDA(register_kernels)                    \
  STABLE_TORCH_LIBRARY_IMPL(tcgemm, CPU, m) { register_kernels(m); } \
  STABLE_TORCH_LIBRARY_IMPL(tcgemm, CUDA, m) { register_kernels(m); }

// The boxed kernel of a C++ op function, as STABLE_TORCH_LIBRARY_IMPL's m.impl takes it (in place of
// TORCH_BOX: tensors arrive as tcgemm::Tensor, results leave without a copy of their handle).
#define TCGEMM_BOX(fn) (&::tcgemm::detail::Boxer<decltype(&(fn))>::template call<&(fn)>)

namespace tcgemm {

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

#include "ops/torch_api.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>
#include <utility>

namespace tcgemm {

namespace {

struct LastError {
  ErrorKind kind = ErrorKind::kNone;
  std::string message;
};
thread_local LastError g_last_error;

// A C shim call that failed: an error of tcgemm's binding layer (RuntimeError).
void shim_check(AOTITorchError status, const char* what) {
  if (status != AOTI_TORCH_SUCCESS) raise_error(ErrorKind::kInternal, cat("tcgemm: torch could not ", what));
}

int32_t device_type_of(const Tensor& t) { return t.device_type(); }

// A torch::stable::Tensor of the same tensor (a new handle), for the stable headers' ops.
torch::stable::Tensor as_stable(const Tensor& t) {
  AtenTensorHandle h = nullptr;
  shim_check(aoti_torch_new_tensor_handle(t.get(), &h), "refer to a tensor");
  return torch::stable::Tensor(h);
}

Tensor from_stable(const torch::stable::Tensor& t) {
  AtenTensorHandle h = nullptr;
  shim_check(aoti_torch_new_tensor_handle(t.get(), &h), "refer to a tensor");
  return Tensor(h);
}

// The element types tcgemm names: each one's C shim code (read once), its name as Python prints it
// and whether it is a floating-point type.
struct DtypeEntry {
  int32_t code;
  ScalarType type;
  const char* name;
  bool floating;
};

struct ShimCodes {
  std::array<DtypeEntry, 20> dtypes;
  int32_t cpu, cuda, meta;
};

const ShimCodes& shim_codes() {
  static const ShimCodes codes = {
      {{
          {aoti_torch_dtype_int8(), ScalarType::Char, "torch.int8", false},
          {aoti_torch_dtype_uint8(), ScalarType::Byte, "torch.uint8", false},
          {aoti_torch_dtype_int32(), ScalarType::Int, "torch.int32", false},
          {aoti_torch_dtype_float32(), ScalarType::Float, "torch.float32", true},
          {aoti_torch_dtype_bfloat16(), ScalarType::BFloat16, "torch.bfloat16", true},
          {aoti_torch_dtype_float16(), ScalarType::Half, "torch.float16", true},
          {aoti_torch_dtype_int16(), ScalarType::Short, "torch.int16", false},
          {aoti_torch_dtype_int64(), ScalarType::Long, "torch.int64", false},
          {aoti_torch_dtype_float64(), ScalarType::Double, "torch.float64", true},
          {aoti_torch_dtype_bool(), ScalarType::Bool, "torch.bool", false},
          {aoti_torch_dtype_uint16(), ScalarType::UInt16, "torch.uint16", false},
          {aoti_torch_dtype_uint32(), ScalarType::UInt32, "torch.uint32", false},
          {aoti_torch_dtype_uint64(), ScalarType::UInt64, "torch.uint64", false},
          {aoti_torch_dtype_complex32(), ScalarType::ComplexHalf, "torch.complex32", false},
          {aoti_torch_dtype_complex64(), ScalarType::ComplexFloat, "torch.complex64", false},
          {aoti_torch_dtype_complex128(), ScalarType::ComplexDouble, "torch.complex128", false},
          {aoti_torch_dtype_float8_e4m3fn(), ScalarType::Float8_e4m3fn, "torch.float8_e4m3fn", true},
          {aoti_torch_dtype_float8_e5m2(), ScalarType::Float8_e5m2, "torch.float8_e5m2", true},
          {aoti_torch_dtype_float8_e4m3fnuz(), ScalarType::Float8_e4m3fnuz, "torch.float8_e4m3fnuz", true},
          {aoti_torch_dtype_float8_e5m2fnuz(), ScalarType::Float8_e5m2fnuz, "torch.float8_e5m2fnuz", true},
      }},
      aoti_torch_device_type_cpu(),
      aoti_torch_device_type_cuda(),
      aoti_torch_device_type_meta(),
  };
  return codes;
}

const DtypeEntry* dtype_entry(ScalarType t) {
  for (const DtypeEntry& e : shim_codes().dtypes)
    if (e.type == t) return &e;
  return nullptr;
}

int32_t dtype_code(ScalarType t) {
  if (const DtypeEntry* e = dtype_entry(t)) return e->code;
  raise_error(ErrorKind::kInternal, cat("tcgemm: no tensor of ", dtype_name(t), " is made here"));
}

Tensor from_handle(AtenTensorHandle h) { return Tensor(h); }

}  // namespace

Tensor::Tensor(const Tensor& other) : m_(other.m_) {
  if (other.h_ != nullptr) shim_check(aoti_torch_new_tensor_handle(other.h_, &h_), "refer to a tensor");
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    reset();
    h_ = other.h_;
    m_ = other.m_;
    other.h_ = nullptr;
  }
  return *this;
}

void Tensor::reset() {
  if (h_ != nullptr) aoti_torch_delete_tensor_object(h_);  // a destructor reports nothing
  h_ = nullptr;
  m_.read = false;
}

void Tensor::read_meta() const {
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  const bool ok = aoti_torch_get_dim(h_, &m_.dim) == AOTI_TORCH_SUCCESS &&
                  aoti_torch_get_sizes(h_, &sizes) == AOTI_TORCH_SUCCESS &&
                  aoti_torch_get_strides(h_, &strides) == AOTI_TORCH_SUCCESS &&
                  aoti_torch_get_dtype(h_, &m_.dtype) == AOTI_TORCH_SUCCESS &&
                  aoti_torch_get_device_type(h_, &m_.device_type) == AOTI_TORCH_SUCCESS &&
                  aoti_torch_get_device_index(h_, &m_.device_index) == AOTI_TORCH_SUCCESS;
  if (!ok) raise_error(ErrorKind::kInternal, "tcgemm: torch could not read a tensor's metadata");
  m_.sizes = sizes;
  m_.strides = strides;
  m_.read = true;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d = 0; d < dim(); ++d) n *= size(d);
  return n;
}

void* Tensor::data_ptr() const {
  void* p = nullptr;
  shim_check(aoti_torch_get_data_ptr(h_, &p), "read a tensor's data pointer");
  return p;
}

bool Tensor::is_contiguous() const {  // torch's definition, from the sizes and strides
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (size(d) == 1) continue;
    if (stride(d) != expected) return false;
    expected *= size(d);
  }
  return true;
}

int64_t Tensor::storage_offset() const {
  int64_t offset = 0;
  shim_check(aoti_torch_get_storage_offset(h_, &offset), "read a tensor's storage offset");
  return offset;
}

int64_t Tensor::element_size() const { return static_cast<int64_t>(aoti_torch_dtype_element_size(dtype_code())); }

namespace detail {
void check_arity(uint64_t num_args, uint64_t expected_args, uint64_t num_outputs, uint64_t expected_outputs) {
  TCGEMM_CHECK_INTERNAL(num_args == expected_args && num_outputs == expected_outputs, "tcgemm: the schema has ",
                        num(static_cast<int64_t>(num_args)), " arguments and ", num(static_cast<int64_t>(num_outputs)),
                        " results, the kernel ", num(static_cast<int64_t>(expected_args)), " and ",
                        num(static_cast<int64_t>(expected_outputs)));
}

std::string Unbox<std::string>::take(StableIValue v) {
  const StringHandle handle = torch::stable::detail::to<StringHandle>(v);
  size_t length = 0;
  const char* chars = nullptr;
  const AOTITorchError read = torch_string_length(handle, &length) == AOTI_TORCH_SUCCESS
                                  ? torch_string_c_str(handle, &chars)
                                  : AOTI_TORCH_FAILURE;
  std::string s = read == AOTI_TORCH_SUCCESS ? std::string(chars, length) : std::string();
  shim_check(torch_delete_string(handle), "release a string argument");
  shim_check(read, "read a string argument");
  return s;
}
}  // namespace detail

void Sizes::too_many_dims(int64_t n) {
  raise_error(ErrorKind::kInternal,
              cat("tcgemm: tensors of more than ", num(kMaxDims), " dimensions are not supported here, got ", num(n)));
}

std::string num_float(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

void raise_error(ErrorKind kind, std::string message) {
  g_last_error.kind = kind;
  g_last_error.message = message;
  throw std::runtime_error(std::move(message));
}

ErrorKind last_error_kind(std::string_view message) {
  return g_last_error.message == message ? g_last_error.kind : ErrorKind::kNone;
}

std::string shape_str(const Sizes& sizes) {
  std::string s = "[";
  for (int64_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + num(sizes[i]);
  return s + "]";
}

std::string shape_str(const Tensor& t) { return shape_str(sizes_of(t)); }

std::string strides_str(const Tensor& t) { return shape_str(Sizes(t.strides_data(), t.strides_data() + t.dim())); }

std::string dtype_name(ScalarType t) {
  const DtypeEntry* e = dtype_entry(t);
  return e != nullptr ? e->name : "torch." + std::string(torch::headeronly::toString(t));
}

bool is_floating(ScalarType t) {
  const DtypeEntry* e = dtype_entry(t);
  return e != nullptr && e->floating;
}

ScalarType dtype_of(const Tensor& t) {
  const int32_t code = t.dtype_code();
  for (const DtypeEntry& e : shim_codes().dtypes)
    if (e.code == code) return e.type;
  return as_stable(t).scalar_type();  // a dtype tcgemm never takes: the stable headers' full conversion
}

bool is_cuda(const Tensor& t) { return device_type_of(t) == shim_codes().cuda; }
bool is_cpu(const Tensor& t) { return device_type_of(t) == shim_codes().cpu; }

std::string device_str(const Tensor& t) {
  const int32_t type = device_type_of(t);
  if (type == shim_codes().cpu) return "cpu";
  if (type == shim_codes().cuda) return "cuda:" + num(t.get_device_index());
  if (type == shim_codes().meta) return "meta";
  return "device type " + num(type);
}

bool same_device(const Tensor& a, const Tensor& b) {
  return device_type_of(a) == device_type_of(b) && a.get_device_index() == b.get_device_index();
}

Sizes sizes_of(const Tensor& t) { return Sizes(t.sizes_data(), t.sizes_data() + t.dim()); }

bool sizes_equal(const Tensor& t, const Sizes& sizes) {
  return t.dim() == sizes.size() && std::equal(sizes.begin(), sizes.end(), t.sizes_data());
}

namespace {
// The start of t's storage (its data less its storage offset), or null for a storage without
// memory.
uintptr_t storage_base(const Tensor& t) {
  const auto data = reinterpret_cast<uintptr_t>(t.data_ptr());
  if (data == 0) return 0;
  return data - static_cast<uintptr_t>(t.storage_offset()) * t.element_size();
}
}  // namespace

bool is_alias_of(const Tensor& a, const Tensor& b) {
  // Two live storages with memory never start at the same address.
  const uintptr_t base = storage_base(a);
  return base != 0 && base == storage_base(b);
}

Overlap internal_overlap(const Tensor& t) {
  if (t.is_contiguous()) return Overlap::kNo;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dimensions longer than 1
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) <= 1) continue;
    if (t.stride(d) == 0) return Overlap::kYes;
    dims.emplace_back(t.stride(d), t.size(d));
  }
  // Dense in some order (a permutation of a contiguous layout): no element twice.
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return Overlap::kTooHard;
    expected *= size;
  }
  return Overlap::kNo;
}

Tensor empty(const Sizes& sizes, ScalarType dtype, const Tensor& like) {
  const int64_t dim = sizes.size();
  int64_t strides[Sizes::kMaxDims];
  int64_t stride = 1;
  for (int64_t d = dim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  AtenTensorHandle h = nullptr;
  if (aoti_torch_empty_strided(dim, sizes.data(), strides, dtype_code(dtype), device_type_of(like),
                               like.get_device_index(), &h) != AOTI_TORCH_SUCCESS) {
    raise_error(ErrorKind::kInternal, cat("tcgemm: torch could not allocate a tensor of shape ", shape_str(sizes)));
  }
  return from_handle(h);
}

Tensor view_as_strided(const Tensor& t, const Sizes& sizes, const Sizes& strides, int64_t offset) {
  AtenTensorHandle h = nullptr;  // the offset argument adds to the tensor's own storage offset
  shim_check(aoti_torch__reinterpret_tensor(t.get(), static_cast<int64_t>(sizes.size()), sizes.data(), strides.data(),
                                            offset, &h),
             "view a tensor");
  return from_handle(h);
}

Tensor transposed(const Tensor& t) { return view_as_strided(t, {t.size(1), t.size(0)}, {t.stride(1), t.stride(0)}); }

Tensor first_cols(const Tensor& t, int64_t cols) {
  return view_as_strided(t, {t.size(0), cols}, {t.stride(0), t.stride(1)});
}

void copy_into(const Tensor& dst, const Tensor& src) {
  shim_check(aoti_torch_copy_(dst.get(), src.get(), 0), "copy a tensor");
}

void zero(const Tensor& t) { shim_check(aoti_torch_zero_(t.get()), "zero a tensor"); }

void fill(const Tensor& t, double value) { torch::stable::fill_(as_stable(t), value); }

Tensor contiguous_clone(const Tensor& t) {
  Tensor out = empty(sizes_of(t), dtype_of(t), t);
  copy_into(out, t);
  return out;
}

const Tensor& dense(const Tensor& t, std::optional<Tensor>& copy) {
  if (t.is_contiguous()) return t;
  copy = contiguous_clone(t);
  return *copy;
}

Tensor as_contiguous(const Tensor& t) { return t.is_contiguous() ? t : contiguous_clone(t); }

Tensor reshape(const Tensor& t, int64_t rows, int64_t cols) {
  const std::array<int64_t, 2> shape{rows, cols};
  return from_stable(
      torch::stable::reshape(as_stable(t), torch::headeronly::IntHeaderOnlyArrayRef(shape.data(), shape.size())));
}

const Tensor& float_dense(const Tensor& t, std::optional<Tensor>& copy) {
  if (dtype_of(t) == ScalarType::Float && t.is_contiguous()) return t;
  copy = empty(sizes_of(t), ScalarType::Float, t);
  copy_into(*copy, t);
  return *copy;
}

Tensor sum_int32(const Tensor& t, int64_t dim) {
  const std::array<int64_t, 1> dims{dim};
  return from_stable(torch::stable::sum(
      as_stable(t), torch::headeronly::IntHeaderOnlyArrayRef(dims.data(), dims.size()), false, ScalarType::Int));
}

Tensor sum_times_128_int32(const Tensor& t, int64_t dim) {
  // In fp64, which holds these integers exactly (a sum of uint8 over K < 2^30, times 128, is below
  // 2^45), with the ops torch 2.11's stable headers have: 128 s = s - (-127) s; then int64, and
  // int32 wrapping modulo 2^32 as the int64 sums' conversion does.
  const std::array<int64_t, 1> dims{dim};
  const torch::stable::Tensor s = torch::stable::sum(
      as_stable(t), torch::headeronly::IntHeaderOnlyArrayRef(dims.data(), dims.size()), false, ScalarType::Double);
  const torch::stable::Tensor s128 = torch::stable::subtract(s, s, -127.0);
  return from_stable(torch::stable::to(torch::stable::to(s128, ScalarType::Long), ScalarType::Int));
}

std::pair<int64_t, int64_t> int8_range_cpu(const Tensor& t) {
  const Tensor dense = as_contiguous(t);
  const int8_t* v = const_data<int8_t>(dense);
  const auto [lo, hi] = std::minmax_element(v, v + dense.numel());
  return {*lo, *hi};
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: none visible
    return 0;
  }
  return count;
}

cudaStream_t current_cuda_stream(int32_t index) {
  void* stream = nullptr;
  shim_check(aoti_torch_get_current_cuda_stream(index, &stream), "read the current CUDA stream");
  return static_cast<cudaStream_t>(stream);
}

CudaDeviceScope::CudaDeviceScope(int32_t index) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != index) guard_.emplace(index);
}

}  // namespace tcgemm

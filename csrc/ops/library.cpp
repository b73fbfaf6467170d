// The tcgemm op library: every schema in one STABLE_TORCH_LIBRARY block (the kernels per dispatch
// key are registered beside each op: gemm.cpp, scaled_gemm.cpp, quantize.cpp, quant_linear.cpp,
// int4.cpp), the backend queries (dispatch's capability table), and the Python module that makes
// the shared library importable as tcgemm._C and tells which kind of error an op raised.
#include <Python.h>

#include <string>

#include "dispatch/backends.h"
#include "ops/cpu_parallel.h"
#include "ops/tensor_args.h"
#include "ops/torch_api.h"

namespace tcgemm {
namespace {

// Comma-separated GPU backends of a device, best first; "" when it has none.
std::string available_backends(int64_t device_index) {
  const int count = cuda_device_count();
  TCGEMM_CHECK_VALUE(device_index >= 0 && device_index < count,
                     "tcgemm.available_backends: "
                     "argument 'device' must name one of the ",
                     num(count), " visible CUDA devices, got index ", num(device_index));
  std::string s;
  for (Backend b : gpu_backends(device_info(static_cast<int32_t>(device_index))))
    s += (s.empty() ? "" : ",") + std::string(backend_name(b));
  return s;
}

// Every backend name, comma-separated, in the order of tcgemm.BACKENDS.
std::string backend_names() {
  std::string s = backend_choices();
  std::string out;
  for (char c : s)
    if (c != ' ') out += c;
  return out;
}

std::string backend_epilogues() { return backend_epilogue_table(); }

}  // namespace

STABLE_TORCH_LIBRARY(tcgemm, m) {
  m.def("gemm(Tensor a, Tensor b, Tensor? c=None, int alpha=1, int beta=0, str backend='auto') -> Tensor");
  m.def("gemm_out(Tensor a, Tensor b, Tensor? c, int alpha, int beta, str backend, *, Tensor(a!) out) -> ()");
  m.def(
      "scaled_gemm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "ScalarType? out_dtype=None, str backend='auto', Tensor? zero_point_a=None, Tensor? colsum_b=None) -> Tensor");
  m.def(
      "quantize(Tensor x, str granularity, Tensor? scale=None, Tensor? smooth=None, bool rotate=False) -> "
      "(Tensor, Tensor)");
  m.def(
      "quantize_asym(Tensor x, str granularity, Tensor? scale=None, Tensor? zero_point=None, Tensor? smooth=None) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "quant_linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None, str activation='token', "
      "Tensor? input_scale=None, Tensor? smooth=None, str backend='auto', bool asymmetric=False, "
      "Tensor? input_zero_point=None, Tensor? weight_colsum=None, Tensor? weight_group_scale=None, "
      "bool rotate=False, Tensor? weight_zero_point=None) -> Tensor");
  // Packed 4-bit weights (common/int4.h).
  m.def("unpack_int4(Tensor packed, Tensor? group_scale=None, Tensor? zero_point=None) -> Tensor");
  m.def("gemm_int4(Tensor a, Tensor b, Tensor? group_scale=None, str backend='auto') -> Tensor");
  m.def("available_backends(int device_index) -> str");
  m.def("backend_names() -> str");
  // Per backend, in tcgemm.BACKENDS order, the epilogue families it runs: "auto=int32+scaled+per_block,...".
  m.def("backend_epilogues() -> str");
}

// The queries take no tensor: one kernel for every backend.
STABLE_TORCH_LIBRARY_IMPL(tcgemm, CompositeExplicitAutograd, m) {
  m.impl("available_backends", TORCH_BOX(&available_backends));
  m.impl("backend_names", TORCH_BOX(&backend_names));
  m.impl("backend_epilogues", TORCH_BOX(&backend_epilogues));
}

}  // namespace tcgemm

namespace {

// tcgemm._C.error_kind(message): what the error with this message means, when it is the last one
// an op raised on this thread (0 otherwise): 1 ValueError, 2 TypeError, 3 RuntimeError
// (ops/torch_api.h ErrorKind).
PyObject* error_kind(PyObject* /*self*/, PyObject* message) {
  PyObject* utf8 = PyUnicode_AsUTF8String(message);  // the limited API's way to the text
  if (utf8 == nullptr) return nullptr;
  char* text = nullptr;
  Py_ssize_t size = 0;
  const bool read = PyBytes_AsStringAndSize(utf8, &text, &size) == 0;
  const auto kind =
      read ? tcgemm::last_error_kind(std::string_view(text, static_cast<size_t>(size))) : tcgemm::ErrorKind::kNone;
  Py_DECREF(utf8);
  return read ? PyLong_FromLong(static_cast<long>(kind)) : nullptr;
}

PyObject* cpu_threads_of_last_call(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromLongLong(static_cast<long long>(tcgemm::cpu_threads_of_last_call().load()));
}

PyMethodDef methods[] = {
    {"error_kind", error_kind, METH_O,
     "What a tcgemm op's error with this message means, if it is the last one raised on this thread: "
     "1 ValueError, 2 TypeError, 3 RuntimeError; 0 for any other message."},
    {"cpu_threads_of_last_call", cpu_threads_of_last_call, METH_NOARGS,
     "How many distinct threads ran the latest CPU-path op's work in this process (0 before the first)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

extern "C" {
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, methods};
  return PyModule_Create(&module_def);
}
}

// The tcgemm op library: every schema in one TORCH_LIBRARY block (the kernels per dispatch key are
// registered beside each op: gemm.cpp, scaled_gemm.cpp, quantize.cpp, quant_linear.cpp), the
// backend queries (dispatch's capability table), and the Python module init that makes the shared
// library importable as tcgemm._C.
#include <Python.h>

#include <ATen/cuda/CUDAContext.h>
#include <torch/library.h>

#include <string>

#include "dispatch/backends.h"
#include "ops/tensor_args.h"

namespace tcgemm {
namespace {

// Comma-separated GPU backends of a device, best first; "" when it has none.
std::string available_backends(int64_t device_index) {
  TORCH_CHECK_VALUE(device_index >= 0 && device_index < at::cuda::device_count(), "tcgemm.available_backends: "
                    "argument 'device' must name one of the ", num(at::cuda::device_count()),
                    " visible CUDA devices, got index ", num(device_index));
  std::string s;
  for (Backend b : gpu_backends(device_info(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index)))))
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

}  // namespace

TORCH_LIBRARY(tcgemm, m) {
  m.def("gemm(Tensor a, Tensor b, Tensor? c=None, int alpha=1, int beta=0, str backend='auto') -> Tensor");
  m.def("gemm_out(Tensor a, Tensor b, Tensor? c, int alpha, int beta, str backend, *, Tensor(a!) out) -> ()");
  m.def(
      "scaled_gemm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
      "ScalarType? out_dtype=None, str backend='auto', Tensor? zero_point_a=None, Tensor? colsum_b=None) -> Tensor");
  m.def("quantize(Tensor x, str granularity, Tensor? scale=None, Tensor? smooth=None) -> (Tensor, Tensor)");
  m.def(
      "quantize_asym(Tensor x, str granularity, Tensor? scale=None, Tensor? zero_point=None, Tensor? smooth=None) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "quant_linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None, str activation='token', "
      "Tensor? input_scale=None, Tensor? smooth=None, str backend='auto', bool asymmetric=False, "
      "Tensor? input_zero_point=None, Tensor? weight_colsum=None, Tensor? weight_group_scale=None) -> Tensor");
  // Packed 4-bit weights (common/int4.h).
  m.def("unpack_int4(Tensor packed, Tensor? group_scale=None) -> Tensor");
  m.def("gemm_int4(Tensor a, Tensor b, Tensor? group_scale=None, str backend='auto') -> Tensor");
  m.def("available_backends(int device_index) -> str", &available_backends);
  m.def("backend_names() -> str", &backend_names);
  // Per backend, in tcgemm.BACKENDS order, the epilogue families it runs: "auto=int32+scaled+per_block,...".
  m.def("backend_epilogues() -> str", &backend_epilogue_table);
}

}  // namespace tcgemm

extern "C" {
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

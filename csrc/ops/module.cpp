// Makes the shared library importable as the Python module tcgemm._C; the ops themselves are
// registered with the dispatcher by TORCH_LIBRARY when the library loads.
#include <Python.h>

extern "C" {
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

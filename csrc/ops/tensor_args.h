// Helpers every op's binding code shares: message formatting, argument checks that name the
// argument, the [rows, K] description of an int8 operand, the device description for dispatch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/problem.h"
#include "dispatch/backends.h"
#include "ops/torch_api.h"

namespace tcgemm {

bool fits_int32(int64_t v);

// A 2-D int8/uint8 operand (int8 only when signed_only) with dimensions below 2^30.
void check_operand(const char* op, const Tensor& t, const char* name, const char* shape, bool signed_only = false);
void check_same_device(const char* op, const Tensor& t, const char* name, const Tensor& ref,
                       const char* ref_name = "a");
Backend parse_backend_arg(const char* op, std::string_view name);

// The [rows, K] view of an operand: A as given, B transposed (transpose = true).
Operand describe(const Tensor& t, bool transpose);

// The problem A [M, K] @ B [K, N] -> d (its data, row stride and element type). b_rows: `b` is
// given as its [N, K] rows (an nn.Linear weight), not as [K, N] (no transposed view is made).
GemmProblem gemm_problem(const Tensor& a, const Tensor& b, void* d, int64_t ldd, OutType type, bool b_rows = false);
// The same with A described directly: m rows of k.
GemmProblem gemm_problem(const Operand& a, int64_t m, int64_t k, const Tensor& b, void* d, int64_t ldd, OutType type,
                         bool b_rows);

// A K-major copy of the [rows, K] view (A, or B transposed) whose rows are padded to 16 bytes:
// the layout every GPU kernel reads directly. Returns the [rows, K] view of the padded buffer.
Tensor k_major_copy(const Tensor& t, bool transpose);

// What the GPU a CUDA tensor lives on is (read once per device).
DeviceInfo device_info(const Tensor& t);
DeviceInfo device_info(int32_t device_index);

// Gives p.a / p.b a K-major padded copy when `backend` cannot read them in place; the copies
// are returned so they outlive the launch (the caching allocator keeps them stream-ordered). An
// A described without its 2-D tensor (quant_linear's scratch) must fit every backend.
struct OperandCopies {
  std::optional<Tensor> a, b;
};
OperandCopies fit_operands(Backend backend, const Tensor& a, const Tensor& b, GemmProblem& p, bool b_rows = false);

// CPU tensors take the backends "auto" and "cpu" only.
void check_cpu_backend(const char* op, Backend requested);

// The CPU path of a GEMM op: checks that `requested` is "auto" or "cpu", makes both operands
// K-major (a contiguous copy of one that is not) and describes them in p; the returned tensors
// must outlive the computation.
OperandCopies cpu_k_major_operands(const char* op, Backend requested, const Tensor& a, const Tensor& b, GemmProblem& p,
                                   bool b_rows = false);

// Rows of D per CPU task (ops/cpu_parallel.h): about 2M multiply-adds each, which outweighs
// starting a thread.
int64_t cpu_row_grain(const GemmProblem& p);

}  // namespace tcgemm

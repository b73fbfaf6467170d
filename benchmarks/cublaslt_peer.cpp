// cuBLASLt INT8 GEMM peer for benchmarks/bench_gemm.py.
//
// Computes D[M,N] (int32, row-major) = A[M,K] (int8, row-major) @ W[N,K]^T
// (int8, row-major weight, nn.Linear layout) the way a careful cuBLASLt user
// would: INT8 inputs, INT32 output, CUBLAS_COMPUTE_32I with INT32 scales,
// algorithms from cublasLtMatmulAlgoGetHeuristic with a caller-chosen
// workspace limit.
//
// Column-major mapping: cuBLASLt is column-major, so a row-major [R,C] buffer
// is the column-major [C,R] matrix with leading dimension C. We therefore
// compute D^T[N,M] = W[N,K] * A^T[K,M] in column-major terms:
//   cuBLAS A = W buffer, stored K x N (ld K), opA = T  -> op(A) is N x K
//   cuBLAS B = A buffer, stored K x M (ld K), opB = N  -> op(B) is K x M
//   cuBLAS C/D = D buffer, stored N x M (ld N)       -> D row-major [M,N]
// i.e. cuBLAS (m, n, k) = (N, M, K), the "TN" form INT8 IMMA kernels want.

#include <torch/extension.h>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace {

#define LT_CHECK(expr)                                                      \
  do {                                                                      \
    const cublasStatus_t lt_status_ = (expr);                               \
    TORCH_CHECK(lt_status_ == CUBLAS_STATUS_SUCCESS, "cuBLASLt call ", #expr, \
                " failed: ", cublasLtGetStatusName(lt_status_), " (",       \
                cublasLtGetStatusString(lt_status_), ")");                  \
  } while (0)

// One handle for the whole process; cuBLASLt handles are not tied to a
// stream, and the stream is passed to every cublasLtMatmul call.
cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t handle = nullptr;
  static std::once_flag once;
  std::call_once(once, [] { LT_CHECK(cublasLtCreate(&handle)); });
  return handle;
}

void set_op(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
            cublasOperation_t op) {
  LT_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &op, sizeof(op)));
}

class Plan {
 public:
  Plan(int64_t m, int64_t n, int64_t k, int64_t workspace_bytes,
       int64_t max_algos)
      : m_(m), n_(n), k_(k) {
    TORCH_CHECK(m > 0 && n > 0 && k > 0, "Plan: M, N, K must be positive");
    TORCH_CHECK(workspace_bytes >= 0, "Plan: workspace_bytes must be >= 0");
    TORCH_CHECK(max_algos > 0, "Plan: max_algos must be positive");

    LT_CHECK(cublasLtMatmulDescCreate(&op_desc_, CUBLAS_COMPUTE_32I, CUDA_R_32I));
    set_op(op_desc_, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    set_op(op_desc_, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);

    // See the column-major mapping at the top of the file.
    LT_CHECK(cublasLtMatrixLayoutCreate(&w_layout_, CUDA_R_8I, k, n, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&a_layout_, CUDA_R_8I, k, m, k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&d_layout_, CUDA_R_32I, n, m, n));

    cublasLtMatmulPreference_t pref = nullptr;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = static_cast<uint64_t>(workspace_bytes);
    const cublasStatus_t set_status = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));

    std::vector<cublasLtMatmulHeuristicResult_t> results(max_algos);
    int returned = 0;
    const cublasStatus_t heur_status =
        set_status != CUBLAS_STATUS_SUCCESS
            ? set_status
            : cublasLtMatmulAlgoGetHeuristic(
                  lt_handle(), op_desc_, w_layout_, a_layout_, d_layout_,
                  d_layout_, pref, static_cast<int>(max_algos), results.data(),
                  &returned);
    cublasLtMatmulPreferenceDestroy(pref);

    // NOT_SUPPORTED means "no algorithm for this problem": an empty plan.
    if (heur_status != CUBLAS_STATUS_NOT_SUPPORTED) {
      LT_CHECK(heur_status);
    }
    for (int i = 0; i < returned; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) {
        algos_.push_back(results[i]);
      }
    }
  }

  ~Plan() {
    // Destructors must not throw; failures here are ignored on purpose.
    if (d_layout_) cublasLtMatrixLayoutDestroy(d_layout_);
    if (a_layout_) cublasLtMatrixLayoutDestroy(a_layout_);
    if (w_layout_) cublasLtMatrixLayoutDestroy(w_layout_);
    if (op_desc_) cublasLtMatmulDescDestroy(op_desc_);
  }

  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  int64_t num_algos() const { return static_cast<int64_t>(algos_.size()); }

  int64_t algo_workspace(int64_t index) const {
    return static_cast<int64_t>(algo(index).workspaceSize);
  }

  double algo_waves(int64_t index) const { return algo(index).wavesCount; }

  // d = a @ w.t() with heuristic result `index`, on the current torch stream.
  void run(int64_t index, const torch::Tensor& a, const torch::Tensor& w,
           const torch::Tensor& d, const torch::Tensor& workspace) const {
    const cublasLtMatmulHeuristicResult_t& chosen = algo(index);
    check_operand(a, torch::kChar, m_, k_, "a");
    check_operand(w, torch::kChar, n_, k_, "w");
    check_operand(d, torch::kInt, m_, n_, "d");
    TORCH_CHECK(workspace.is_cuda() && workspace.is_contiguous(),
                "workspace must be a contiguous CUDA tensor");
    TORCH_CHECK(workspace.nbytes() >= chosen.workspaceSize,
                "workspace too small: ", workspace.nbytes(), " bytes < ",
                chosen.workspaceSize, " needed by algorithm ", index);
    TORCH_CHECK(a.device() == w.device() && a.device() == d.device() &&
                    a.device() == workspace.device(),
                "a, w, d and workspace must be on the same device");

    const c10::cuda::CUDAGuard guard(a.device());
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const int32_t alpha = 1;
    const int32_t beta = 0;
    LT_CHECK(cublasLtMatmul(lt_handle(), op_desc_, &alpha, w.data_ptr(),
                            w_layout_, a.data_ptr(), a_layout_, &beta,
                            d.data_ptr(), d_layout_, d.data_ptr(), d_layout_,
                            &chosen.algo, workspace.data_ptr(),
                            workspace.nbytes(), stream));
  }

 private:
  const cublasLtMatmulHeuristicResult_t& algo(int64_t index) const {
    TORCH_CHECK(index >= 0 && index < num_algos(), "algorithm index ", index,
                " out of range [0, ", num_algos(), ")");
    return algos_[static_cast<size_t>(index)];
  }

  static void check_operand(const torch::Tensor& t, c10::ScalarType dtype,
                            int64_t rows, int64_t cols, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ",
                t.scalar_type());
    TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, name,
                " must have shape [", rows, ", ", cols, "], got ", t.sizes());
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous (row-major)");
  }

  int64_t m_, n_, k_;
  cublasLtMatmulDesc_t op_desc_ = nullptr;
  cublasLtMatrixLayout_t w_layout_ = nullptr;
  cublasLtMatrixLayout_t a_layout_ = nullptr;
  cublasLtMatrixLayout_t d_layout_ = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos_;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "cuBLASLt INT8 TN GEMM peer: d[M,N] int32 = a[M,K] @ w[N,K]^T";
  pybind11::class_<Plan, std::shared_ptr<Plan>>(m, "Plan")
      .def(pybind11::init<int64_t, int64_t, int64_t, int64_t, int64_t>(),
           pybind11::arg("m"), pybind11::arg("n"), pybind11::arg("k"),
           pybind11::arg("workspace_bytes"), pybind11::arg("max_algos") = 4,
           "Query up to max_algos heuristic algorithms for an M x N x K GEMM.")
      .def_property_readonly("num_algos", &Plan::num_algos)
      .def("algo_workspace", &Plan::algo_workspace, pybind11::arg("index"),
           "Workspace bytes the heuristic reported for algorithm `index`.")
      .def("algo_waves", &Plan::algo_waves, pybind11::arg("index"),
           "Waves count the heuristic reported for algorithm `index`.")
      .def("run", &Plan::run, pybind11::arg("index"), pybind11::arg("a"),
           pybind11::arg("w"), pybind11::arg("d"), pybind11::arg("workspace"),
           "d = a @ w.t() with algorithm `index` on the current CUDA stream.");
}

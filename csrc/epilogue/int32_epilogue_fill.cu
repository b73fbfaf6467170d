#include "epilogue/int32_epilogue_fill.h"

#include <algorithm>

#include "common/cuda_check.h"
#include "common/math.h"

namespace tcgemm {
namespace {

__global__ void epilogue_fill_kernel(const GemmProblem p, const Int32Epilogue epi) {
  int32_t* d = static_cast<int32_t*>(p.d.ptr);
  const int64_t total = static_cast<int64_t>(p.m) * p.n;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i / p.n;
    const int64_t n = i - m * p.n;
    d[m * p.d.ld + n] = epi(0, m, n);
  }
}

}  // namespace

void launch_epilogue_fill(const GemmProblem& p, const Int32EpilogueParams& epilogue) {
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(int64_t{p.m} * p.n, kThreads), 65535);
  epilogue_fill_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, p.stream>>>(p, Int32Epilogue{epilogue});
  TCGEMM_CHECK_LAUNCH();
}

}  // namespace tcgemm

#include "kernels/cpu/cpu_int8_gemm.h"

#include "epilogue/int32_epilogue.h"

namespace tcgemm::cpu {
namespace {

template <typename TA, typename TB>
void gemm_rows(const GemmParams& p, int64_t m_begin, int64_t m_end) {
  const Int32Epilogue epi{p.epilogue};
  const TA* a = static_cast<const TA*>(p.a.ptr);
  const TB* b = static_cast<const TB*>(p.b.ptr);
  for (int64_t m = m_begin; m < m_end; ++m) {
    const TA* a_row = a + m * p.a.stride_row;
    for (int64_t n = 0; n < p.n; ++n) {
      const TB* b_row = b + n * p.b.stride_row;
      uint32_t acc = 0;  // unsigned: wraps modulo 2^32 exactly like the tensor cores' int32
      for (int64_t k = 0; k < p.k; ++k) acc += static_cast<uint32_t>(int32_t{a_row[k]} * int32_t{b_row[k]});
      p.d[m * p.ldd + n] = epi(static_cast<int32_t>(acc), m, n);
    }
  }
}

}  // namespace

void int8_gemm_rows(const GemmParams& p, int64_t m_begin, int64_t m_end) {
  if (p.a.is_signed && p.b.is_signed) return gemm_rows<int8_t, int8_t>(p, m_begin, m_end);
  if (p.a.is_signed) return gemm_rows<int8_t, uint8_t>(p, m_begin, m_end);
  if (p.b.is_signed) return gemm_rows<uint8_t, int8_t>(p, m_begin, m_end);
  return gemm_rows<uint8_t, uint8_t>(p, m_begin, m_end);
}

}  // namespace tcgemm::cpu

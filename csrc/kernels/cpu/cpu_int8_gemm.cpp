#include "kernels/cpu/cpu_int8_gemm.h"

#include <algorithm>

#include "epilogue/int32_epilogue.h"
#include "epilogue/scaled_epilogue.h"

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

// int8 dot product of K indices [k0, k1): exact in int32 for any 128-block, and for a whole row
// while K <= 131071 (the binding layer's limit without per-block scales).
inline int32_t dot(const int8_t* a, const int8_t* b, int64_t k0, int64_t k1) {
  int32_t acc = 0;
  for (int64_t k = k0; k < k1; ++k) acc += int32_t{a[k]} * int32_t{b[k]};
  return acc;
}

template <bool PerBlock>
void scaled_rows(const GemmParams& p, float* out, int64_t m_begin, int64_t m_end) {
  const ScaledEpilogue<float, PerBlock> epi{p.scaled};
  const int8_t* a = static_cast<const int8_t*>(p.a.ptr);
  const int8_t* b = static_cast<const int8_t*>(p.b.ptr);
  const int64_t k_blocks = (int64_t{p.k} + 127) / 128;
  for (int64_t m = m_begin; m < m_end; ++m) {
    const int8_t* a_row = a + m * p.a.stride_row;
    const auto r = epi.row(m);
    for (int64_t n = 0; n < p.n; ++n) {
      const int8_t* b_row = b + n * p.b.stride_row;
      typename ScaledEpilogue<float, PerBlock>::Acc acc{};
      if constexpr (PerBlock) {
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          const int32_t partial = dot(a_row, b_row, kb * 128, std::min<int64_t>(p.k, kb * 128 + 128));
          acc = promote(acc, partial, epi.sa(m, kb) * epi.block_scale_b(n, kb));
        }
      } else {
        acc = dot(a_row, b_row, 0, p.k);
      }
      out[m * p.ldd + n] = epi.value(acc, r, epi.col(n));
    }
  }
}

}  // namespace

void scaled_gemm_rows(const GemmParams& p, float* out, int64_t m_begin, int64_t m_end) {
  if (p.scaled.per_block()) return scaled_rows<true>(p, out, m_begin, m_end);
  return scaled_rows<false>(p, out, m_begin, m_end);
}

void int8_gemm_rows(const GemmParams& p, int64_t m_begin, int64_t m_end) {
  if (p.a.is_signed && p.b.is_signed) return gemm_rows<int8_t, int8_t>(p, m_begin, m_end);
  if (p.a.is_signed) return gemm_rows<int8_t, uint8_t>(p, m_begin, m_end);
  if (p.b.is_signed) return gemm_rows<uint8_t, int8_t>(p, m_begin, m_end);
  return gemm_rows<uint8_t, uint8_t>(p, m_begin, m_end);
}

}  // namespace tcgemm::cpu

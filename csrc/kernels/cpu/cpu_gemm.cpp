#include "kernels/cpu/cpu_gemm.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "common/scale_layout.h"
#include "epilogue/block_scales.h"

namespace tcgemm::cpu {
namespace {

// The dot product of K indices [k0, k1), wrapping modulo 2^32 exactly like the tensor cores' int32.
template <typename TA, typename TB>
int32_t dot(const TA* a, const TB* b, int64_t k0, int64_t k1) {
  uint32_t acc = 0;
  for (int64_t k = k0; k < k1; ++k) acc += static_cast<uint32_t>(int32_t{a[k]} * int32_t{b[k]});
  return static_cast<int32_t>(acc);
}

template <class Epi, typename TA, typename TB>
void rows(const GemmProblem& p, const Epi& epi, int64_t m_begin, int64_t m_end) {
  using Out = typename Epi::OutT;
  const TA* a = static_cast<const TA*>(p.a.ptr);
  const TB* b = static_cast<const TB*>(p.b.ptr);
  Out* d = static_cast<Out*>(p.d.ptr);
  // Promoted per scale group: a K block, or a 1 / b_scale_groups of one (GemmProblem::b_scale_groups).
  const int groups_per_block = p.b_scale_groups;
  const int64_t width = kScaleBlock / groups_per_block, groups = (p.k + width - 1) / width;
  for (int64_t m = m_begin; m < m_end; ++m) {
    const TA* a_row = a + m * p.a.stride_row;
    const typename Epi::Row r = epi.row(m);
    for (int64_t n = 0; n < p.n; ++n) {
      const TB* b_row = b + n * p.b.stride_row;
      typename Epi::Acc acc{};
      if constexpr (Epi::kPromotes) {
        for (int64_t group = 0; group < groups; ++group) {
          const int32_t partial = dot(a_row, b_row, group * width, std::min<int64_t>(p.k, (group + 1) * width));
          const float b_scale = groups_per_block == 1 ? epi.b_block_scale(n, group) : epi.b_group_scale(n, group);
          acc = promote(acc, partial, epi.a_block_scale(m, group / groups_per_block) * b_scale);
        }
      } else {
        acc = dot(a_row, b_row, 0, p.k);
      }
      d[m * p.d.ld + n] = epi.full(acc, r, epi.col(n), m, n);
    }
  }
}

}  // namespace

void gemm_rows(const GemmProblem& p, const EpilogueArgs& epilogue, int64_t m_begin, int64_t m_end) {
  with_epilogue(epilogue, p.d.type, [&](const auto& epi) {
    using Epi = std::decay_t<decltype(epi)>;
    using Out = typename Epi::OutT;
    if constexpr (!std::is_same_v<Out, int32_t> && !std::is_same_v<Out, float>) {
      throw std::logic_error("tcgemm: the CPU path writes int32 or fp32");
    } else {
      with_operand_signs<Epi>(p, [&](auto a_signed, auto b_signed) {
        using TA = std::conditional_t<decltype(a_signed)::value, int8_t, uint8_t>;
        using TB = std::conditional_t<decltype(b_signed)::value, int8_t, uint8_t>;
        rows<Epi, TA, TB>(p, epi, m_begin, m_end);
      });
    }
  });
}

}  // namespace tcgemm::cpu

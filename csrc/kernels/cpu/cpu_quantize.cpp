#include "kernels/cpu/cpu_quantize.h"

#include <algorithm>
#include <cmath>

namespace tcgemm::cpu {
namespace {

// fmax drops NaN like the GPU's fmaxf, so both sides see the same amax.
float amax_of(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}

void quantize_span(const float* x, int8_t* q, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) q[i] = quant_value(x[i], scale);
}

}  // namespace

float quantize_amax_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end) {
  const float* x = static_cast<const float*>(p.x);
  float m = 0.f;
  for (int64_t row = m_begin; row < m_end; ++row) m = std::fmax(m, amax_of(x + row * p.x_stride_row, p.k));
  return m;
}

void quantize_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end, float tensor_scale) {
  const float* x = static_cast<const float*>(p.x);
  const int64_t groups = p.groups();
  for (int64_t row = m_begin; row < m_end; ++row) {
    const float* x_row = x + row * p.x_stride_row;
    int8_t* q_row = p.q + row * p.k;
    switch (p.granularity) {
      case QuantGranularity::kTensor:
        quantize_span(x_row, q_row, p.k, p.scale_in != nullptr ? p.scale_in[0] : tensor_scale);
        break;
      case QuantGranularity::kToken: {
        const float scale = p.scale_in != nullptr ? p.scale_in[row] : quant_scale_from_amax(amax_of(x_row, p.k));
        if (p.scale_in == nullptr) p.scale_out[row] = scale;
        quantize_span(x_row, q_row, p.k, scale);
        break;
      }
      case QuantGranularity::kGroup:
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t begin = g * kScaleBlock;
          const int64_t n = std::min<int64_t>(kScaleBlock, p.k - begin);
          float scale;
          if (p.scale_in != nullptr) {
            scale = p.scale_in[row * groups + g];
          } else {
            scale = quant_scale_from_amax(amax_of(x_row + begin, n));
            p.scale_out[row * groups + g] = scale;
          }
          quantize_span(x_row + begin, q_row + begin, n, scale);
        }
        break;
    }
  }
}

}  // namespace tcgemm::cpu

#include "kernels/cpu/cpu_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <cuda_fp16.h>

namespace tcgemm::cpu {
namespace {

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;  // bf16 is fp32's top half
  float v;
  std::memcpy(&v, &word, sizeof(v));
  return v;
}

float fp16_bits_to_float(uint16_t bits) {
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

// Row `row` of x as K contiguous floats, times the channel multipliers when there are some: in
// place for fp32 rows with unit stride and no multipliers, otherwise converted (exactly) and
// multiplied (one rounding) into `buf`.
const float* row_of(const QuantizeParams& p, int64_t row, std::vector<float>& buf) {
  if (p.dtype == QuantDtype::kFloat32 && (p.x_stride_col == 1 || p.k == 1) && p.channel_mul == nullptr) {
    return static_cast<const float*>(p.x) + row * p.x_stride_row;
  }
  buf.resize(static_cast<size_t>(p.k));
  const int64_t base = row * p.x_stride_row;
  if (p.dtype == QuantDtype::kFloat32) {
    const float* x = static_cast<const float*>(p.x) + base;
    for (int64_t i = 0; i < p.k; ++i) buf[i] = x[i * p.x_stride_col];
  } else {
    const uint16_t* x = static_cast<const uint16_t*>(p.x) + base;
    const bool bf16 = p.dtype == QuantDtype::kBFloat16;
    for (int64_t i = 0; i < p.k; ++i) {
      const uint16_t bits = x[i * p.x_stride_col];
      buf[i] = bf16 ? bf16_bits_to_float(bits) : fp16_bits_to_float(bits);
    }
  }
  if (p.channel_mul != nullptr) {
    for (int64_t i = 0; i < p.k; ++i) buf[i] *= p.channel_mul[i];
  }
  return buf.data();
}

// The K values at x with each block of kScaleBlock values rotated (QuantizeParams::rotate), in
// `out` (K a multiple of the block).
const float* rotated(const float* x, int64_t k, std::vector<float>& out) {
  out.assign(x, x + k);
  for (int64_t b = 0; b + kScaleBlock <= k; b += kScaleBlock) hadamard_block(out.data() + b);
  return out.data();
}

float amax_of(const float* x, int64_t n) {
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) m = amax_fold(m, x[i]);
  return m;
}

// The asymmetric range of n values.
QuantRange<true> range_of(const float* x, int64_t n) {
  QuantRange<true> r;
  for (int64_t i = 0; i < n; ++i) r.fold(x[i]);
  return r;
}

// Quantizes n values with one scale (and zero point, when asymmetric). Static (`mark`
// non-null): a non-finite x, an invalid scale or a zero point outside [-128, 127] sets *mark to NaN.
void quantize_span(const float* x, int8_t* q, int64_t n, float scale, float* mark, bool asymmetric = false,
                   int32_t zero = 0) {
  bool bad = mark != nullptr && (!quant_scale_valid(scale) || (asymmetric && !quant_zero_valid(zero)));
  for (int64_t i = 0; i < n; ++i) {
    q[i] = asymmetric ? quant_value_asym(x[i], scale, zero) : quant_value(x[i], scale);
    bad = bad || (mark != nullptr && !quant_finite(x[i]));
  }
  if (bad) *mark = std::numeric_limits<float>::quiet_NaN();
}

// Asymmetric rows (static, or dynamic per token).
bool quantize_rows_asymmetric(const QuantizeParams& p, int64_t m_begin, int64_t m_end) {
  const bool is_static = p.scale_in != nullptr;
  const bool per_row = p.granularity == QuantGranularity::kToken;
  std::vector<float> buf;
  float tensor_mark = 0.f;
  for (int64_t row = m_begin; row < m_end; ++row) {
    const float* x_row = row_of(p, row, buf);
    const int64_t at = per_row ? row : 0;
    if (is_static) {
      quantize_span(x_row, p.q + row * p.q_stride_row, p.k, p.scale_in[at], per_row ? p.scale_out + row : &tensor_mark, true,
                    p.zero_in[at]);
      continue;
    }
    const QuantRange<true> r = range_of(x_row, p.k);
    const float scale = r.scale();
    const int32_t zero = r.zero(scale);
    p.scale_out[row] = scale;
    p.zero_out[row] = zero;
    quantize_span(x_row, p.q + row * p.q_stride_row, p.k, scale, nullptr, true, zero);
  }
  return tensor_mark != tensor_mark;
}

}  // namespace

float quantize_amax_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end) {
  std::vector<float> buf;
  float m = 0.f;
  for (int64_t row = m_begin; row < m_end; ++row) {
    const float a = amax_of(row_of(p, row, buf), p.k);
    m = (m != m || a != a) ? std::numeric_limits<float>::quiet_NaN() : std::fmax(m, a);
  }
  return m;
}

bool quantize_rows(const QuantizeParams& p, int64_t m_begin, int64_t m_end, float tensor_scale) {
  if (p.asymmetric) return quantize_rows_asymmetric(p, m_begin, m_end);
  const bool is_static = p.scale_in != nullptr;
  const int64_t groups = p.groups();
  std::vector<float> buf, rot;
  float tensor_mark = 0.f;  // static per tensor: NaN once a row was bad
  for (int64_t row = m_begin; row < m_end; ++row) {
    const float* x_row = row_of(p, row, buf);
    if (p.rotate) x_row = rotated(x_row, p.k, rot);
    int8_t* q_row = p.q + row * p.q_stride_row;
    switch (p.granularity) {
      case QuantGranularity::kTensor:
        quantize_span(x_row, q_row, p.k, is_static ? p.scale_in[0] : tensor_scale, is_static ? &tensor_mark : nullptr);
        break;
      case QuantGranularity::kToken: {
        const float scale = is_static ? p.scale_in[row] : quant_scale_from_amax(amax_of(x_row, p.k));
        if (!is_static) p.scale_out[row] = scale;
        quantize_span(x_row, q_row, p.k, scale, is_static ? p.scale_out + row : nullptr);
        break;
      }
      case QuantGranularity::kGroup:
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t begin = g * kScaleBlock;
          const int64_t n = std::min<int64_t>(kScaleBlock, p.k - begin);
          float* out = p.scale_out + row * groups + g;
          const float scale = is_static ? p.scale_in[row * groups + g] : quant_scale_from_amax(amax_of(x_row + begin, n));
          if (!is_static) *out = scale;
          quantize_span(x_row + begin, q_row + begin, n, scale, is_static ? out : nullptr);
        }
        break;
    }
  }
  return tensor_mark != tensor_mark;
}

}  // namespace tcgemm::cpu

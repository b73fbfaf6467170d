// Small integer helpers shared by host and device code.
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace tcgemm {

template <typename T>
TCGEMM_HD constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

template <typename T>
TCGEMM_HD constexpr T round_up(T a, T b) {
  return ceil_div(a, b) * b;
}

// Two's-complement wrapping arithmetic: signed overflow is undefined in C++, unsigned is not.
TCGEMM_HD int32_t wrap_add(int32_t x, int32_t y) {
  return static_cast<int32_t>(static_cast<uint32_t>(x) + static_cast<uint32_t>(y));
}
TCGEMM_HD int32_t wrap_sub(int32_t x, int32_t y) {
  return static_cast<int32_t>(static_cast<uint32_t>(x) - static_cast<uint32_t>(y));
}
TCGEMM_HD int32_t wrap_mul(int32_t x, int32_t y) {
  return static_cast<int32_t>(static_cast<uint32_t>(x) * static_cast<uint32_t>(y));
}

}  // namespace tcgemm

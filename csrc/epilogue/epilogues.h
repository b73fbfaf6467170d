// The epilogues, and the one interface between them and the kernels.
//
// A kernel is a template over its epilogue functor Epi and names no epilogue type. It uses:
//   Epi::OutT, Epi::Acc        the stored element type; what the main loop hands over (int32, or
//                              fp32 when it promotes per-block scales)
//   Epi::kMixedSigns           whether int8 and uint8 operands may be mixed (else int8 x int8)
//   Epi::kAddsPartials         whether split-K may add epi.partial(sum) of each split onto D,
//                              which dispatch prefilled with epilogue(0)
//   Epi::kPromotes             whether the main loop promotes per-block scales: it then calls
//                              a_block_scale(m, kb) / b_block_scale(n, kb) or the cursors
//                              a_block_scales(m) / b_block_scales(n) (epilogue/block_scales.h)
//   Epi::kHasFinish            whether a second, row-wise pass may be due (epi.needs_finish()):
//                              epi.finish(applied, m, n) after apply()
//   epi.row(m), epi.col(n)     what one row / column contributes, loaded once and reused
//   epi.apply(acc, row, col)   the stored value (its finish pass aside)
//   epi.full(acc, row, col, m, n)  the whole epilogue of one element
//   epi.with_a_scales(ptr)     (scaled epilogues only) a copy reading A's scales at ptr, for a
//                              kernel that quantizes A itself
// Adding an epilogue: a functor with these members, an entry in EpilogueArgs and in
// with_epilogue() below, and one in epilogue_types and TCGEMM_FOR_EACH_EPILOGUE; no kernel changes.
#pragma once

#include <stdexcept>
#include <type_traits>
#include <variant>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/problem.h"
#include "epilogue/int32_epilogue.h"
#include "epilogue/scaled_epilogue.h"

namespace tcgemm {

// What the binding layer hands dispatch besides the problem: which epilogue, with its parameters.
using EpilogueArgs = std::variant<Int32EpilogueParams, ScaledEpilogueParams>;

// What a config must support to run an epilogue (kernel configs list theirs in kEpilogues).
enum EpilogueFamily : unsigned {
  kEpiInt32 = 1u << 0,
  kEpiScaled = 1u << 1,     // scaled, scales that do not depend on the K block
  kEpiPerBlock = 1u << 2,   // scaled with promotion of per-block scales
};

template <class Epi>
constexpr unsigned epilogue_family() {
  if constexpr (Epi::kPromotes) {
    return kEpiPerBlock;
  } else if constexpr (Epi::kAddsPartials) {
    return kEpiInt32;
  } else {
    return kEpiScaled;
  }
}

// Whether config Cfg (with its kEpilogues mask) is instantiated for epilogue Epi.
template <class Cfg, class Epi>
constexpr bool config_serves() {
  return (Cfg::kEpilogues & epilogue_family<Epi>()) != 0;
}

inline unsigned epilogue_family_of(const EpilogueArgs& e) {
  if (const auto* s = std::get_if<ScaledEpilogueParams>(&e)) return s->per_block() ? kEpiPerBlock : kEpiScaled;
  return kEpiInt32;
}

// Calls f(bool_constant<a signed>, bool_constant<b signed>) for the operands' signedness: every
// combination when the epilogue allows mixed signs, int8 x int8 otherwise.
template <class Epi, class F>
void with_operand_signs(const GemmProblem& p, F&& f) {
  using T = std::true_type;
  using U = std::false_type;
  if constexpr (Epi::kMixedSigns) {
    if (p.a.is_signed && p.b.is_signed) return f(T{}, T{});
    if (p.a.is_signed) return f(T{}, U{});
    if (p.b.is_signed) return f(U{}, T{});
    return f(U{}, U{});
  } else {
    f(T{}, T{});
  }
}

// Calls f(epi) with the concrete functor for these arguments and output type.
template <class F>
void with_epilogue(const EpilogueArgs& args, OutType out, F&& f) {
  if (const auto* i = std::get_if<Int32EpilogueParams>(&args)) {
    if (out != OutType::kInt32) throw std::logic_error("tcgemm: the int32 epilogue writes int32");
    return f(Int32Epilogue{*i});
  }
  const ScaledEpilogueParams& s = std::get<ScaledEpilogueParams>(args);
  auto scaled = [&](auto out_tag) {
    using Out = decltype(out_tag);
    if (s.asymmetric()) {
      if (s.per_block()) throw std::logic_error("tcgemm: zero points with per-block scales");
      return f(ScaledEpilogue<Out, false, true>{s});
    }
    if (s.per_block()) return f(ScaledEpilogue<Out, true>{s});
    return f(ScaledEpilogue<Out, false>{s});
  };
  switch (out) {
    case OutType::kBf16: return scaled(__nv_bfloat16{});
    case OutType::kFp16: return scaled(__half{});
    case OutType::kFp32: return scaled(float{});
    case OutType::kInt32: break;
  }
  throw std::logic_error("tcgemm: the scaled epilogue writes a float type");
}

}  // namespace tcgemm

// The epilogue functor types under names without commas, for the macro below.
namespace tcgemm::epilogue_types {
using Int32 = Int32Epilogue;
using Bf16 = ScaledEpilogue<__nv_bfloat16, false>;
using Fp16 = ScaledEpilogue<__half, false>;
using Fp32 = ScaledEpilogue<float, false>;
using Bf16PerBlock = ScaledEpilogue<__nv_bfloat16, true>;
using Fp16PerBlock = ScaledEpilogue<__half, true>;
using Fp32PerBlock = ScaledEpilogue<float, true>;
using Bf16Asymmetric = ScaledEpilogue<__nv_bfloat16, false, true>;
using Fp16Asymmetric = ScaledEpilogue<__half, false, true>;
using Fp32Asymmetric = ScaledEpilogue<float, false, true>;
}  // namespace tcgemm::epilogue_types

// X(Epi, Arg) for every epilogue functor type: a kernel family's instantiation files expand their
// launcher template with it, one config (Arg) per file.
#define TCGEMM_FOR_EACH_EPILOGUE(X, Arg)              \
  X(::tcgemm::epilogue_types::Int32, Arg)             \
  X(::tcgemm::epilogue_types::Bf16, Arg)              \
  X(::tcgemm::epilogue_types::Fp16, Arg)              \
  X(::tcgemm::epilogue_types::Fp32, Arg)              \
  X(::tcgemm::epilogue_types::Bf16PerBlock, Arg)      \
  X(::tcgemm::epilogue_types::Fp16PerBlock, Arg)      \
  X(::tcgemm::epilogue_types::Fp32PerBlock, Arg)      \
  X(::tcgemm::epilogue_types::Bf16Asymmetric, Arg)    \
  X(::tcgemm::epilogue_types::Fp16Asymmetric, Arg)    \
  X(::tcgemm::epilogue_types::Fp32Asymmetric, Arg)

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
//   epi.prefetch_col(n)        (device code) col(n)'s cache lines into L2, where a kernel knows
//                              them well before it calls col(n)
//   epi.apply(acc, row, col)   the stored value (its finish pass aside)
//   epi.full(acc, row, col, m, n)  the whole epilogue of one element
//   epi.with_a_scales(ptr)     (scaled epilogues only) a copy reading A's scales at ptr, for a
//                              kernel that quantizes A itself
// Each functor also says how it is chosen: Epi::Params (its parameters, one alternative of
// EpilogueArgs), Epi::selects(params, out) (whether it runs these parameters into OutType out)
// and Epi::kKernelQuantizesA (whether a kernel that quantizes A itself, symmetrically, may run it).
// Adding an epilogue: a functor with these members and one row in TCGEMM_EPILOGUE_TABLE below.
// EpilogueArgs, with_epilogue()'s selection, the instantiation lists (TCGEMM_FOR_EACH_EPILOGUE,
// AllEpilogues) and those of the kernels that quantize A (KernelQuantizingEpilogues) derive from
// that table; no kernel, instantiation file or launch code changes. A functor whose Params is a
// new type also gives that type's family in epilogue_family_of().
#pragma once

#include <stdexcept>
#include <type_traits>
#include <variant>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/problem.h"
#include "epilogue/int32_epilogue.h"
#include "epilogue/scaled_epilogue.h"

// The epilogue registry: E(X, Arg, Name, Functor) for every epilogue functor type, Name its alias
// in tcgemm::epilogue_types (a name without commas, for the macros). X and Arg pass through to E.
#define TCGEMM_EPILOGUE_TABLE(E, X, Arg)                                \
  E(X, Arg, Int32, Int32Epilogue)                                       \
  E(X, Arg, Bf16, ScaledEpilogue<__nv_bfloat16, false>)                 \
  E(X, Arg, Fp16, ScaledEpilogue<__half, false>)                        \
  E(X, Arg, Fp32, ScaledEpilogue<float, false>)                         \
  E(X, Arg, Bf16PerBlock, ScaledEpilogue<__nv_bfloat16, true>)          \
  E(X, Arg, Fp16PerBlock, ScaledEpilogue<__half, true>)                 \
  E(X, Arg, Fp32PerBlock, ScaledEpilogue<float, true>)                  \
  E(X, Arg, Bf16Asymmetric, ScaledEpilogue<__nv_bfloat16, false, true>) \
  E(X, Arg, Fp16Asymmetric, ScaledEpilogue<__half, false, true>)        \
  E(X, Arg, Fp32Asymmetric, ScaledEpilogue<float, false, true>)

namespace tcgemm::epilogue_types {
#define TCGEMM_EPILOGUE_ALIAS_(X, Arg, Name, ...) using Name = __VA_ARGS__;
TCGEMM_EPILOGUE_TABLE(TCGEMM_EPILOGUE_ALIAS_, , )
#undef TCGEMM_EPILOGUE_ALIAS_
}  // namespace tcgemm::epilogue_types

// X(Epi, Arg) for every epilogue functor type: a kernel family's instantiation files expand their
// launcher template with it, one config (Arg) per file.
#define TCGEMM_EPILOGUE_FOR_EACH_(X, Arg, Name, ...) X(::tcgemm::epilogue_types::Name, Arg)
#define TCGEMM_FOR_EACH_EPILOGUE(X, Arg) TCGEMM_EPILOGUE_TABLE(TCGEMM_EPILOGUE_FOR_EACH_, X, Arg)

namespace tcgemm {

template <class... T>
struct TypeList {};

namespace detail {
template <class List>
struct Tail;
template <class Head, class... Rest>
struct Tail<TypeList<Head, Rest...>> {
  using type = TypeList<Rest...>;
};

// std::variant of the distinct Epi::Params of a list of functors, in the order they first appear.
template <class Epis, class Seen = TypeList<>>
struct ParamsVariant;
template <class... Ps>
struct ParamsVariant<TypeList<>, TypeList<Ps...>> {
  using type = std::variant<Ps...>;
};
template <class Epi, class... Rest, class... Ps>
struct ParamsVariant<TypeList<Epi, Rest...>, TypeList<Ps...>> {
  using P = typename Epi::Params;
  using Seen = std::conditional_t<(std::is_same_v<P, Ps> || ...), TypeList<Ps...>, TypeList<Ps..., P>>;
  using type = typename ParamsVariant<TypeList<Rest...>, Seen>::type;
};

// The functors of a list with Epi::kKernelQuantizesA, in order.
template <class Epis, class Kept = TypeList<>>
struct KernelQuantizesA {
  using type = Kept;
};
template <class Epi, class... Rest, class... Kept>
struct KernelQuantizesA<TypeList<Epi, Rest...>, TypeList<Kept...>> {
  using Now = std::conditional_t<Epi::kKernelQuantizesA, TypeList<Kept..., Epi>, TypeList<Kept...>>;
  using type = typename KernelQuantizesA<TypeList<Rest...>, Now>::type;
};
}  // namespace detail

// Every epilogue functor type, in the registry's order.
#define TCGEMM_EPILOGUE_LISTED_(X, Arg, Name, ...) , epilogue_types::Name
using AllEpilogues = detail::Tail<TypeList<void TCGEMM_EPILOGUE_TABLE(TCGEMM_EPILOGUE_LISTED_, , )>>::type;
#undef TCGEMM_EPILOGUE_LISTED_

// The functors a kernel that quantizes A itself runs, and is instantiated for.
using KernelQuantizingEpilogues = detail::KernelQuantizesA<AllEpilogues>::type;

// What the binding layer hands dispatch besides the problem: which epilogue, with its parameters
// (one alternative per distinct Epi::Params).
using EpilogueArgs = detail::ParamsVariant<AllEpilogues>::type;

// What a config must support to run an epilogue (kernel configs list theirs in kEpilogues).
enum EpilogueFamily : unsigned {
  kEpiInt32 = 1u << 0,
  kEpiScaled = 1u << 1,     // scaled, scales that do not depend on the K block
  kEpiPerBlock = 1u << 2,   // scaled with promotion of per-block scales
};

// The families' names (tcgemm.backend_epilogues), in bit order.
struct EpilogueFamilyName {
  EpilogueFamily family;
  const char* name;
};
constexpr EpilogueFamilyName kEpilogueFamilyNames[] = {
    {kEpiInt32, "int32"}, {kEpiScaled, "scaled"}, {kEpiPerBlock, "per_block"}};

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

// Why no functor of the registry runs these parameters into `out` (with_epilogue's logic_error).
template <class P>
const char* no_epilogue_reason(const P&, OutType) {
  return "tcgemm: no epilogue for these arguments and output type";
}
inline const char* no_epilogue_reason(const Int32EpilogueParams&, OutType) {
  return "tcgemm: the int32 epilogue writes int32";
}
inline const char* no_epilogue_reason(const ScaledEpilogueParams& s, OutType out) {
  if (out == OutType::kInt32) return "tcgemm: the scaled epilogue writes a float type";
  if (s.asymmetric() && s.per_block()) return "tcgemm: zero points with per-block scales";
  return "tcgemm: no scaled epilogue for these scales and output type";
}

namespace detail {
template <class Epi, class P, class F>
bool select_one(const P& params, OutType out, F& f) {
  if constexpr (std::is_same_v<typename Epi::Params, P>) {
    if (!Epi::selects(params, out)) return false;
    f(Epi{params});
    return true;
  } else {
    return false;
  }
}
template <class P, class F, class... Epis>
bool select_first(TypeList<Epis...>, const P& params, OutType out, F& f) {
  return (select_one<Epis>(params, out, f) || ...);
}
}  // namespace detail

// Calls f(Epi{params}) with the first functor Epi of Epis (a TypeList) whose Params is P and
// that selects (params, out); returns whether there was one.
template <class Epis, class P, class F>
bool select_epilogue(const P& params, OutType out, F&& f) {
  return detail::select_first(Epis{}, params, out, f);
}

// Calls f(epi) with the concrete functor for these arguments and output type.
template <class F>
void with_epilogue(const EpilogueArgs& args, OutType out, F&& f) {
  std::visit(
      [&](const auto& params) {
        if (!select_epilogue<AllEpilogues>(params, out, f)) throw std::logic_error(no_epilogue_reason(params, out));
      },
      args);
}

}  // namespace tcgemm

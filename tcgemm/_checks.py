"""The argument checks of the tcgemm ops: one table that the fake (meta) kernels evaluate and the
error tests read.

The checks that count are the C++ binding layer's (``csrc/ops/``): every op validates its arguments
there. The fakes (FakeTensor, meta tensors, torch.compile) never reach that code, so this table
states the same checks for them: per op, in the order the C++ makes them, each with the exception
type (``TCGEMM_CHECK_VALUE`` stands for ValueError, ``TCGEMM_CHECK_TYPE`` for TypeError, which the
Python API raises: ``_library.typed_error``) and the C++ message, word for word. The first check
that fails is the error, as in C++. Conditions read only metadata
(shapes, strides, dtypes, devices, scalar arguments), so symbolic sizes work: a condition on them
becomes a guard, or a ``torch._check_*`` of a SymBool.

Not stated here: what depends on the GPU or the backend table of the C++ dispatch (which backends a
GPU runs, which run the scaled GEMM); those errors come from the real op only.
``tests/test_checks.py`` triggers every entry and compares the real op with its fake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from . import _scales
from ._library import BACKENDS
from .scheme import ACTIVATION_GRANULARITIES, LAYER_ACTIVATIONS

Args = dict[str, Any]

_GEMM = "tcgemm.gemm"
_SCALED = "tcgemm.scaled_gemm"
_QUANTIZE = "tcgemm.quantize"
_QUANTIZE_ASYM = "tcgemm.quantize_asym"
_QUANT_LINEAR = "tcgemm.quant_linear"
_MAX_DIM = 2**30  # kernels index tiles and K slices in 32-bit arithmetic with headroom
_MAX_UNBLOCKED_K = 131071  # int8 x int8 dot products of this length fit in int32
_MAX_ASYMMETRIC_K = 65793  # with zero points: |sum_k (q - zp) * w| <= 255 * 128 * K fits int32
_INT32_MIN, _INT32_END = -(2**31), 2**31
_GEMM_OPERAND_DTYPES = (torch.int8, torch.uint8)
_QUANTIZE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@dataclass(frozen=True)
class Check:
    """One check: ``holds(args)`` must be true, else ``error(message(args))`` is raised.

    ``args`` maps the op's argument names (as in its schema) to their values."""

    name: str
    error: type[Exception]
    holds: Callable[[Args], Any]
    message: Callable[[Args], str]


def _shape(t: torch.Tensor) -> str:
    return str(list(t.shape))


def _mnk(x: Args):
    a, b = x["a"], x["b"]
    return a.shape[0], b.shape[1], a.shape[1]


def _operand(op: str, name: str, shape: str, dtypes: tuple[torch.dtype, ...]) -> list[Check]:
    """csrc/ops/tensor_args.cpp check_operand: a 2-D integer operand with dimensions below 2^30."""
    names = " or ".join(map(str, dtypes))
    return [
        Check(f"{name}_dim", ValueError, lambda x: x[name].dim() == 2,
              lambda x: f"{op}: argument '{name}' must be a 2-D tensor {shape}, got a {x[name].dim()}-D tensor"),
        Check(f"{name}_dtype", TypeError, lambda x: x[name].dtype in dtypes,
              lambda x: f"{op}: argument '{name}' must have dtype {names}, got {x[name].dtype}"),
        Check(f"{name}_size", ValueError, lambda x: x[name].shape[0] < _MAX_DIM and x[name].shape[1] < _MAX_DIM,
              lambda x: f"{op}: argument '{name}' has a dimension >= 2^30, which is not supported"),
    ]


def _same_device(op: str, name: str, ref: str = "a") -> Check:
    """tensor_args.cpp check_same_device (an optional argument that is None passes)."""
    return Check(
        f"{name}_device", ValueError, lambda x: x[name] is None or x[name].device == x[ref].device,
        lambda x: f"{op}: argument '{name}' must be on the same device as '{ref}' ({x[ref].device}), "
        f"got {x[name].device}",
    )


def _backend_name(op: str) -> Check:
    """tensor_args.cpp parse_backend_arg."""
    return Check(
        "backend_name", ValueError, lambda x: x["backend"] in BACKENDS,
        lambda x: f"{op}: argument 'backend' must be one of {', '.join(BACKENDS)}; got '{x['backend']}'",
    )


def _k_match(op: str) -> Check:
    return Check(
        "k_match", ValueError, lambda x: x["a"].shape[1] == x["b"].shape[0],
        lambda x: f"{op}: K mismatch: 'a' is [M, K] = {_shape(x['a'])} but 'b' is [K, N] = {_shape(x['b'])}",
    )


def _cpu_backend(op: str, empty: Callable[[Args], Any]) -> Check:
    """tensor_args.cpp cpu_k_major_operands: CPU tensors take "auto" or "cpu". Reached only when
    the op has work to do (``empty`` is false)."""
    return Check(
        "backend_on_cpu", ValueError,
        lambda x: x["backend"] in ("auto", "cpu") or x["a"].device.type != "cpu" or empty(x),
        lambda x: f"{op}: backend '{x['backend']}' needs CUDA tensors, got tensors on cpu (argument 'backend')",
    )


def _int32_mn(name: str) -> list[Check]:
    """gemm.cpp check_int32_mn and the device check of c / out (an absent c passes)."""

    def shape_ok(x):
        t, (m, n, _) = x[name], _mnk(x)
        return t.dim() == 2 and t.shape[0] == m and t.shape[1] == n

    def shape_message(x):
        m, n, _ = _mnk(x)
        return f"{_GEMM}: argument '{name}' must have shape [M, N] = [{m}, {n}], got {_shape(x[name])}"

    return [
        Check(f"{name}_dtype", TypeError, lambda x: x[name] is None or x[name].dtype == torch.int32,
              lambda x: f"{_GEMM}: argument '{name}' must have dtype torch.int32, got {x[name].dtype}"),
        Check(f"{name}_shape", ValueError, lambda x: x[name] is None or shape_ok(x), shape_message),
        _same_device(_GEMM, name),
    ]


def _gemm_empty(x: Args):
    m, n, _ = _mnk(x)
    return m == 0 or n == 0


def int32_range_message(name: str, value: int) -> str:
    return f"{_GEMM}: argument '{name}' must fit in int32, got {value}"


def _int32_range(name: str) -> Check:
    return Check(f"{name}_range", ValueError, lambda x: _INT32_MIN <= x[name] < _INT32_END,
                 lambda x: int32_range_message(name, x[name]))


def _gemm_checks(out_arg: bool) -> list[Check]:
    """csrc/ops/gemm.cpp. tcgemm::gemm checks its operands, allocates `out` and runs gemm_out,
    which parses `backend` before it checks the operands."""
    dtypes = _GEMM_OPERAND_DTYPES
    operands = _operand(_GEMM, "a", "[M, K]", dtypes) + _operand(_GEMM, "b", "[K, N]", dtypes)
    head = [_backend_name(_GEMM)] + operands if out_arg else operands + [_backend_name(_GEMM)]
    checks = head + [
        _same_device(_GEMM, "b"),
        _k_match(_GEMM),
        _int32_range("alpha"),
        _int32_range("beta"),
        Check("beta_needs_c", ValueError, lambda x: x["beta"] == 0 or x["c"] is not None,
              lambda x: f"{_GEMM}: argument 'beta' is {x['beta']} but no 'c' was given"),
        *_int32_mn("c"),
    ]
    if out_arg:
        checks += [
            *_int32_mn("out"),
            Check("out_overlap", ValueError, lambda x: torch._debug_has_internal_overlap(x["out"]) != 1,
                  lambda x: f"{_GEMM}: argument 'out' has elements that share memory (an expand()-ed view?); every "
                  "element must be writable on its own"),
            Check("out_alias_a", ValueError, lambda x: not torch._C._is_alias_of(x["out"], x["a"]),
                  lambda x: f"{_GEMM}: argument 'out' must not share memory with 'a'"),
            Check("out_alias_b", ValueError, lambda x: not torch._C._is_alias_of(x["out"], x["b"]),
                  lambda x: f"{_GEMM}: argument 'out' must not share memory with 'b'"),
        ]
    return checks + [_cpu_backend(_GEMM, _gemm_empty)]


def _out_dtype(x: Args) -> torch.dtype:
    return torch.bfloat16 if x["out_dtype"] is None else x["out_dtype"]


def _scale_dtype(name: str) -> Check:
    return Check(f"{name}_dtype", TypeError, lambda x: x[name].dtype == torch.float32,
                 lambda x: f"{_SCALED}: argument '{name}' must have dtype torch.float32, got {x[name].dtype}")


def _scale_a_layout(x: Args) -> Optional[str]:
    m, _, k = _mnk(x)
    return _scales.decode_scale_a(x["scale_a"].shape, m, k)


def _scale_b_layout(x: Args) -> Optional[str]:
    _, n, k = _mnk(x)
    return _scales.decode_scale_b(x["scale_b"].shape, n, k)


def _scale_a_message(x: Args) -> str:
    m, _, k = _mnk(x)
    return (f"{_SCALED}: argument 'scale_a' must have shape {_scales.scale_a_shapes(m, _scales.k_blocks(k))}, "
            f"got {_shape(x['scale_a'])}")


def _scale_b_message(x: Args) -> str:
    _, n, k = _mnk(x)
    return (f"{_SCALED}: argument 'scale_b' must have shape {_scales.scale_b_shapes(n, _scales.k_blocks(k))}, "
            f"got {_shape(x['scale_b'])}")


def _per_block(x: Args):
    """Whether either scale changes along K (the op then promotes partial sums per 128 of K)."""
    k = x["a"].shape[1]
    return (_scales.scale_varies_along_k(x["scale_a"], _scale_a_layout(x), k)
            or _scales.scale_varies_along_k(x["scale_b"], _scale_b_layout(x), k))


def _scaled_empty(x: Args):
    m, n, k = _mnk(x)
    return m == 0 or n == 0 or k == 0


def _bias_shape_ok(x: Args):
    bias, (_, n, _) = x["bias"], _mnk(x)
    return bias is None or (bias.dim() == 1 and bias.shape[0] == n)


def _zero_point_checks(op: str, name: str, rows: Callable[[Args], Any], ref: str) -> list[Check]:
    """scaled_gemm.cpp checked_zero_point: int32 zero points of an activation's rows, one element
    or [M, 1] (an absent one passes)."""

    def shape_ok(x):
        z = x[name]
        return z is None or (z.dim() <= 2 and z.numel() == 1) or (
            z.dim() == 2 and z.shape[0] == rows(x) and z.shape[1] == 1)

    return [
        Check(f"{name}_dtype", TypeError, lambda x: x[name] is None or x[name].dtype == torch.int32,
              lambda x: f"{op}: argument '{name}' must have dtype torch.int32, got {x[name].dtype}"),
        _same_device(op, name, ref=ref),
        Check(f"{name}_shape", ValueError, shape_ok,
              lambda x: f"{op}: argument '{name}' must have shape [] or [1] (per-tensor) or [M, 1] = [{rows(x)}, 1] "
              f"(per-token), got {_shape(x[name])}"),
    ]


def _colsum_checks(op: str, name: str, n: Callable[[Args], Any], ref: str) -> list[Check]:
    """scaled_gemm.cpp checked_colsum: int32 [N] column sums of the weight (an absent one passes)."""
    return [
        Check(f"{name}_dtype", TypeError, lambda x: x[name] is None or x[name].dtype == torch.int32,
              lambda x: f"{op}: argument '{name}' must have dtype torch.int32, got {x[name].dtype}"),
        _same_device(op, name, ref=ref),
        Check(f"{name}_shape", ValueError,
              lambda x: x[name] is None or (x[name].dim() == 1 and x[name].shape[0] == n(x)),
              lambda x: f"{op}: argument '{name}' must have shape [N] = [{n(x)}], got {_shape(x[name])}"),
    ]


def _asymmetric_k(op: str, applies: Callable[[Args], Any], k: Callable[[Args], Any], zero_name: str) -> Check:
    """scaled_gemm.cpp check_asymmetric_k."""
    return Check("k_overflow_asymmetric", ValueError, lambda x: not applies(x) or k(x) <= _MAX_ASYMMETRIC_K,
                 lambda x: f"{op}: K = {k(x)} > {_MAX_ASYMMETRIC_K} could overflow the int32 sums with zero points "
                 f"(argument '{zero_name}')")


def _scaled_gemm_checks() -> list[Check]:
    """csrc/ops/scaled_gemm.cpp."""
    signed = (torch.int8,)
    return [
        _backend_name(_SCALED),
        *_operand(_SCALED, "a", "[M, K]", signed),
        *_operand(_SCALED, "b", "[K, N]", signed),
        _same_device(_SCALED, "b"),
        _k_match(_SCALED),
        Check("out_dtype", TypeError, lambda x: _out_dtype(x) in _OUT_DTYPES,
              lambda x: f"{_SCALED}: argument 'out_dtype' must be torch.bfloat16, torch.float16 or torch.float32, "
              f"got {_out_dtype(x)}"),
        _scale_dtype("scale_a"),
        _same_device(_SCALED, "scale_a"),
        _scale_dtype("scale_b"),
        _same_device(_SCALED, "scale_b"),
        Check("scale_a_shape", ValueError, lambda x: _scale_a_layout(x) is not None, _scale_a_message),
        Check("scale_b_shape", ValueError, lambda x: _scale_b_layout(x) is not None, _scale_b_message),
        Check("bias_shape", ValueError, _bias_shape_ok,
              lambda x: f"{_SCALED}: argument 'bias' must have shape [N] = [{_mnk(x)[1]}], got {_shape(x['bias'])}"),
        Check("bias_dtype", TypeError, lambda x: x["bias"] is None or x["bias"].dtype.is_floating_point,
              lambda x: f"{_SCALED}: argument 'bias' must have a floating-point dtype, got {x['bias'].dtype}"),
        _same_device(_SCALED, "bias"),
        *_zero_point_checks(_SCALED, "zero_point_a", lambda x: _mnk(x)[0], "a"),
        Check("colsum_b_unused", ValueError, lambda x: x["zero_point_a"] is not None or x["colsum_b"] is None,
              lambda x: f"{_SCALED}: argument 'colsum_b' is used only with 'zero_point_a'"),
        *_colsum_checks(_SCALED, "colsum_b", lambda x: _mnk(x)[1], "a"),
        Check("zero_point_a_per_block", ValueError, lambda x: x["zero_point_a"] is None or not _per_block(x),
              lambda x: f"{_SCALED}: argument 'zero_point_a' needs scales that do not change along K (scale_a per "
              "tensor or per token, scale_b per tensor or per channel)"),
        Check("k_overflow", ValueError, lambda x: _per_block(x) or x["a"].shape[1] <= _MAX_UNBLOCKED_K,
              lambda x: f"{_SCALED}: K = {x['a'].shape[1]} > {_MAX_UNBLOCKED_K} could overflow the int32 accumulator "
              "without per-block scales; pass scale_a as [M, ceil(K/128)] (per-block 1x128)"),
        _asymmetric_k(_SCALED, lambda x: x["zero_point_a"] is not None, lambda x: x["a"].shape[1], "zero_point_a"),
        _cpu_backend(_SCALED, _scaled_empty),
    ]


def _given_scale_checks(op: str, name: str, dtype: torch.dtype) -> list[Check]:
    """quantize.cpp check_scale: a given scale (or zero point) of x [M, K] quantized with the
    granularity: dtype, device, then its shape (an absent one passes)."""

    def shape_ok(x):
        s, g = x[name], x["granularity"]
        m, k = x["x"].shape
        return g == "tensor" or s is None or list(s.shape) == list(_scales.quantize_scale_shape(g, m, k))

    def shape_message(x):
        g = x["granularity"]
        m, k = x["x"].shape
        form = "[M, 1]" if g == "token" else "[M, ceil(K / 128)]"
        expected = list(_scales.quantize_scale_shape(g, m, k))
        return f"{op}: argument '{name}' must have shape {form} = {expected} for granularity '{g}', got {_shape(x[name])}"

    return [
        Check(f"{name}_dtype", TypeError, lambda x: x[name] is None or x[name].dtype == dtype,
              lambda x: f"{op}: argument '{name}' must have dtype {dtype}, got {x[name].dtype}"),
        _same_device(op, name, ref="x"),
        Check(f"{name}_shape_tensor", ValueError,
              lambda x: x["granularity"] != "tensor" or x[name] is None or (x[name].numel() == 1 and x[name].dim() <= 2),
              lambda x: f"{op}: argument '{name}' must have one element (shape [], [1] or [1, 1]) for "
              f"granularity 'tensor', got shape {_shape(x[name])}"),
        Check(f"{name}_shape", ValueError, shape_ok, shape_message),
    ]


def _quantize_x_checks(op: str) -> list[Check]:
    """quantize.cpp check_x."""
    return [
        Check("x_dim", ValueError, lambda x: x["x"].dim() == 2,
              lambda x: f"{op}: argument 'x' must be a 2-D tensor [M, K], got a {x['x'].dim()}-D tensor"),
        Check("x_dtype", TypeError, lambda x: x["x"].dtype in _QUANTIZE_DTYPES,
              lambda x: f"{op}: argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, "
              f"got {x['x'].dtype}"),
    ]


def _smooth_checks(op: str) -> list[Check]:
    """quantize.cpp check_smooth: the SmoothQuant multipliers of x [..., K], fp32 [K]."""
    return [
        Check("smooth_dtype", TypeError, lambda x: x["smooth"] is None or x["smooth"].dtype == torch.float32,
              lambda x: f"{op}: argument 'smooth' must have dtype torch.float32, got {x['smooth'].dtype}"),
        Check("smooth_shape", ValueError,
              lambda x: x["smooth"] is None or (x["smooth"].dim() == 1 and x["smooth"].shape[0] == x["x"].shape[-1]),
              lambda x: f"{op}: argument 'smooth' must have shape [K] = [{x['x'].shape[-1]}], got {_shape(x['smooth'])}"),
        _same_device(op, "smooth", ref="x"),
    ]


def _rotate_checks(op: str, is_static: Callable[[Args], Any], asymmetric: Callable[[Args], Any],
                   per_tensor: Optional[Callable[[Args], Any]]) -> list[Check]:
    """quantize.cpp check_rotate: rotate=True needs dynamic symmetric scales per token or group (a
    check ``per_tensor`` is None where the dynamic ones cannot be per tensor), no SmoothQuant, and K a
    multiple of 128."""
    checks = [
        Check("rotate_dynamic", ValueError,
              lambda x: not x["rotate"] or not (is_static(x) or x["smooth"] is not None or asymmetric(x)),
              lambda x: f"{op}: rotate=True needs dynamic symmetric scales and no 'smooth'"),
    ]
    if per_tensor is not None:
        checks.append(Check("rotate_granularity", ValueError, lambda x: not x["rotate"] or not per_tensor(x),
                            lambda x: f"{op}: rotate=True needs granularity 'token' or 'group', got 'tensor'"))
    checks.append(Check("rotate_blocks", ValueError,
                        lambda x: not x["rotate"] or x["x"].shape[-1] % _scales.SCALE_BLOCK == 0,
                        lambda x: f"{op}: rotate=True needs K a multiple of {_scales.SCALE_BLOCK} (one Hadamard "
                        f"block), got 'x' of shape {_shape(x['x'])}"))
    return checks


def _quantize_checks() -> list[Check]:
    """csrc/ops/quantize.cpp quantize."""
    return [
        *_quantize_x_checks(_QUANTIZE),
        Check("granularity", ValueError, lambda x: x["granularity"] in ACTIVATION_GRANULARITIES,
              lambda x: f"{_QUANTIZE}: argument 'granularity' must be one of 'tensor', 'token', 'group'; "
              f"got '{x['granularity']}'"),
        *_given_scale_checks(_QUANTIZE, "scale", torch.float32),
        *_smooth_checks(_QUANTIZE),
        *_rotate_checks(_QUANTIZE, lambda x: x["scale"] is not None, lambda x: False,
                        lambda x: x["granularity"] == "tensor"),
    ]


def _quantize_asym_checks() -> list[Check]:
    """csrc/ops/quantize.cpp quantize_asym."""
    op = _QUANTIZE_ASYM
    return [
        *_quantize_x_checks(op),
        Check("granularity", ValueError, lambda x: x["granularity"] in ("token", "tensor"),
              lambda x: f"{op}: argument 'granularity' must be 'token' or 'tensor'; got '{x['granularity']}'"),
        Check("scale_zero_point_together", ValueError, lambda x: (x["scale"] is None) == (x["zero_point"] is None),
              lambda x: f"{op}: arguments 'scale' and 'zero_point' must be given together (static) or both be None "
              "(dynamic)"),
        Check("tensor_needs_static", ValueError, lambda x: x["scale"] is not None or x["granularity"] == "token",
              lambda x: f"{op}: granularity 'tensor' needs a static 'scale' and 'zero_point' (dynamic asymmetric "
              "quantization is per token)"),
        *_given_scale_checks(op, "scale", torch.float32),
        *_given_scale_checks(op, "zero_point", torch.int32),
        *_smooth_checks(op),
    ]


def _ql_packed(x: Args) -> bool:
    """Whether quant_linear's weight is packed 4-bit (uint8 [N, K/2])."""
    return x["weight"].dtype == torch.uint8


def _ql_nkm(x: Args):
    """(N, K, rows) of quant_linear: x [..., K] is seen as rows of K."""
    w, xs = x["weight"], x["x"].shape
    rows = 1
    for size in xs[:-1]:
        rows = rows * size
    return w.shape[0], xs[-1] if _ql_packed(x) else w.shape[1], rows


def _packed_checks(op: str, name: str, k: Callable[[Args], Any], k_from: str,
                   applies: Callable[[Args], Any] = lambda x: True, reachable: tuple[str, ...] = ()) -> list[Check]:
    """csrc/ops/int4.cpp check_packed_weight: uint8 [N, K/2] for an even K, contiguous along K.
    ``reachable``: the checks an op can fail (all when empty): a weight known to be uint8 passes
    the dtype, a K read off the packed rows the K checks."""
    def when(cond):
        return lambda x: not applies(x) or cond(x)

    checks = [
        Check(f"{name}_packed_dim", ValueError, when(lambda x: x[name].dim() == 2),
              lambda x: f"{op}: argument '{name}' (4-bit) must be a 2-D tensor [N, K/2], got a {x[name].dim()}-D "
              "tensor"),
        Check(f"{name}_packed_dtype", TypeError, when(lambda x: x[name].dtype == torch.uint8),
              lambda x: f"{op}: argument '{name}' (4-bit) must have dtype torch.uint8 (two 4-bit values per byte), "
              f"got {x[name].dtype}"),
        Check(f"{name}_packed_k_even", ValueError, when(lambda x: k(x) % 2 == 0),
              lambda x: f"{op}: a 4-bit '{name}' packs two values per byte along K, so K ({k_from}) must be even, "
              f"got K = {k(x)}"),
        Check(f"{name}_packed_shape", ValueError, when(lambda x: x[name].shape[1] == k(x) // 2),
              lambda x: f"{op}: argument '{name}' (4-bit) must have shape [N, K/2] = [{x[name].shape[0]}, "
              f"{k(x) // 2}] for K = {k(x)} ({k_from}), got {_shape(x[name])}"),
        Check(f"{name}_packed_stride", ValueError, when(lambda x: x[name].stride(1) == 1 or x[name].shape[1] <= 1),
              lambda x: f"{op}: argument '{name}' (4-bit) must be contiguous along K (stride 1 in its last "
              f"dimension), got strides {list(x[name].stride())}"),
        Check(f"{name}_packed_size", ValueError,
              when(lambda x: x[name].shape[0] < _MAX_DIM and k(x) < _MAX_DIM),
              lambda x: f"{op}: argument '{name}' has a dimension >= 2^30, which is not supported"),
    ]
    return [c for c in checks if not reachable or c.name[len(name) + 1:] in reachable]


def _group_scale_checks(op: str, name: str, nk: Callable[[Args], Any], ref: str) -> list[Check]:
    """csrc/ops/int4.cpp check_group_scale (its values are checked on CPU tensors after these)."""
    def given(cond):
        return lambda x: x[name] is None or cond(x)

    def shape(x):
        n, k = nk(x)
        return [n, _scales.scale_blocks(k)]

    return [
        Check(f"{name}_dtype", TypeError, given(lambda x: x[name].dtype == torch.int8),
              lambda x: f"{op}: argument '{name}' must have dtype torch.int8, got {x[name].dtype}"),
        _same_device(op, name, ref=ref),
        Check(f"{name}_shape", ValueError, given(lambda x: list(x[name].shape) == shape(x)),
              lambda x: f"{op}: argument '{name}' must have shape [N, ceil(K/128)] = {shape(x)}, got "
              f"{_shape(x[name])}"),
    ]


def _ql_weight_scale_layout(x: Args) -> Optional[str]:
    n, k, _ = _ql_nkm(x)
    return _scales.decode_weight_scale(x["weight_scale"].shape, n, k)


def _ql_weight_scale_message(x: Args) -> str:
    n, k, _ = _ql_nkm(x)
    return (f"{_QUANT_LINEAR}: argument 'weight_scale' must have shape "
            f"{_scales.weight_scale_shapes(n, _scales.scale_blocks(k))}, got {_shape(x['weight_scale'])}")


def _ql_per_block_weight(x: Args):
    return _scales.scale_varies_along_k(x["weight_scale"], _ql_weight_scale_layout(x), _ql_nkm(x)[1])


def _ql_empty(x: Args):
    n, k, rows = _ql_nkm(x)
    return rows == 0 or n == 0 or k == 0


def _ql_asymmetric_checks() -> list[Check]:
    """quant_linear.cpp check_asymmetric (the checks after the first apply with asymmetric=True)."""
    op = _QUANT_LINEAR

    def asym(cond):
        return lambda x: not x["asymmetric"] or cond(x)

    izp = "input_zero_point"
    return [
        Check("asymmetric_args_unused", ValueError,
              lambda x: x["asymmetric"] or (x[izp] is None and x["weight_colsum"] is None),
              lambda x: f"{op}: arguments 'input_zero_point' and 'weight_colsum' are used only with asymmetric=True"),
        Check("asymmetric_block", ValueError, asym(lambda x: x["activation"] != "block"),
              lambda x: f"{op}: asymmetric=True needs activation='token' or 'static', got activation='block'"),
        Check("asymmetric_weight_block", ValueError, asym(lambda x: not _ql_per_block_weight(x)),
              lambda x: f"{op}: asymmetric=True needs a per-channel 'weight_scale' [N] (zero points are not applied "
              "per K block)"),
        Check("input_zero_point_missing", ValueError, asym(lambda x: x["activation"] != "static" or x[izp] is not None),
              lambda x: f"{op}: argument 'input_zero_point' is required with activation='static' and asymmetric=True"),
        Check("input_zero_point_unused", ValueError, asym(lambda x: x["activation"] == "static" or x[izp] is None),
              lambda x: f"{op}: argument 'input_zero_point' is used only with activation='static', "
              f"got activation='{x['activation']}'"),
        Check("input_zero_point_dtype", TypeError, asym(lambda x: x[izp] is None or x[izp].dtype == torch.int32),
              lambda x: f"{op}: argument 'input_zero_point' must have dtype torch.int32, got {x[izp].dtype}"),
        Check("input_zero_point_shape", ValueError,
              asym(lambda x: x[izp] is None or (x[izp].numel() == 1 and x[izp].dim() <= 2)),
              lambda x: f"{op}: argument 'input_zero_point' must have one element (shape [], [1] or [1, 1]), got "
              f"shape {_shape(x[izp])}"),
        Check("input_zero_point_device", ValueError, asym(lambda x: x[izp] is None or x[izp].device == x["x"].device),
              lambda x: f"{op}: argument 'input_zero_point' must be on the same device as 'x' ({x['x'].device}), "
              f"got {x[izp].device}"),
    ]


def _quant_linear_checks() -> list[Check]:
    """csrc/ops/quant_linear.cpp."""
    op = _QUANT_LINEAR
    return [
        _backend_name(op),
        Check("activation", ValueError, lambda x: x["activation"] in LAYER_ACTIVATIONS,
              lambda x: f"{op}: argument 'activation' must be 'token', 'block' or 'static', got '{x['activation']}'"),
        Check("x_dtype", TypeError, lambda x: x["x"].dtype in _QUANTIZE_DTYPES,
              lambda x: f"{op}: argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, "
              f"got {x['x'].dtype}"),
        Check("x_dim", ValueError, lambda x: x["x"].dim() >= 1,
              lambda x: f"{op}: argument 'x' must have at least one dimension [..., K], got a 0-D tensor"),
        *_packed_checks(op, "weight", lambda x: x["x"].shape[-1], "the last dimension of 'x'", _ql_packed,
                        ("packed_dim", "packed_k_even", "packed_shape", "packed_stride", "packed_size")),
        *[Check(c.name, c.error, (lambda h: lambda x: _ql_packed(x) or h(x))(c.holds), c.message)
          for c in _operand(op, "weight", "[N, K]", (torch.int8,))],
        _same_device(op, "weight", ref="x"),
        Check("k_match", ValueError, lambda x: _ql_packed(x) or x["x"].shape[-1] == x["weight"].shape[1],
              lambda x: f"{op}: in_features mismatch: 'x' is [..., K] = {_shape(x['x'])} but 'weight' is [N, K] = "
              f"{_shape(x['weight'])}"),
        Check("weight_scale_dtype", TypeError, lambda x: x["weight_scale"].dtype == torch.float32,
              lambda x: f"{op}: argument 'weight_scale' must have dtype torch.float32, got {x['weight_scale'].dtype}"),
        Check("weight_scale_shape", ValueError, lambda x: _ql_weight_scale_layout(x) is not None,
              _ql_weight_scale_message),
        _same_device(op, "weight_scale", ref="x"),
        Check("weight_group_scale_unpacked", ValueError, lambda x: x["weight_group_scale"] is None or _ql_packed(x),
              lambda x: f"{op}: argument 'weight_group_scale' is used only with a 4-bit 'weight' (torch.uint8)"),
        Check("weight_group_scale_per_channel", ValueError,
              lambda x: x["weight_group_scale"] is None or not _ql_per_block_weight(x),
              lambda x: f"{op}: argument 'weight_group_scale' (two-level scales) needs a per-channel "
              "'weight_scale' [N]"),
        *_group_scale_checks(op, "weight_group_scale", lambda x: _ql_nkm(x)[:2], "x"),
        Check("bias_shape", ValueError,
              lambda x: x["bias"] is None or (x["bias"].dim() == 1 and x["bias"].shape[0] == _ql_nkm(x)[0]),
              lambda x: f"{op}: argument 'bias' must have shape [N] = [{_ql_nkm(x)[0]}], got {_shape(x['bias'])}"),
        Check("bias_dtype", TypeError, lambda x: x["bias"] is None or x["bias"].dtype.is_floating_point,
              lambda x: f"{op}: argument 'bias' must have a floating-point dtype, got {x['bias'].dtype}"),
        _same_device(op, "bias", ref="x"),
        Check("input_scale_missing", ValueError, lambda x: x["activation"] != "static" or x["input_scale"] is not None,
              lambda x: f"{op}: argument 'input_scale' is required with activation='static'"),
        Check("input_scale_unused", ValueError, lambda x: x["activation"] == "static" or x["input_scale"] is None,
              lambda x: f"{op}: argument 'input_scale' is used only with activation='static', "
              f"got activation='{x['activation']}'"),
        Check("input_scale_dtype", TypeError, lambda x: x["input_scale"] is None or x["input_scale"].dtype == torch.float32,
              lambda x: f"{op}: argument 'input_scale' must have dtype torch.float32, got {x['input_scale'].dtype}"),
        Check("input_scale_shape", ValueError,
              lambda x: x["input_scale"] is None or (x["input_scale"].numel() == 1 and x["input_scale"].dim() <= 2),
              lambda x: f"{op}: argument 'input_scale' must have one element (shape [], [1] or [1, 1]), got shape "
              f"{_shape(x['input_scale'])}"),
        _same_device(op, "input_scale", ref="x"),
        *_smooth_checks(op),
        *_ql_asymmetric_checks(),
        *_colsum_checks(op, "weight_colsum", lambda x: _ql_nkm(x)[0], "x"),
        Check("k_overflow", ValueError,
              lambda x: x["activation"] == "block" or _ql_per_block_weight(x) or _ql_nkm(x)[1] <= _MAX_UNBLOCKED_K,
              lambda x: f"{op}: K = {_ql_nkm(x)[1]} > {_MAX_UNBLOCKED_K} could overflow the int32 accumulator "
              "without per-block scales; use activation='block'"),
        _asymmetric_k(op, lambda x: x["asymmetric"], lambda x: _ql_nkm(x)[1], "asymmetric"),
        *_rotate_checks(op, lambda x: x["activation"] == "static", lambda x: x["asymmetric"], None),
        Check("backend_on_cpu", ValueError,
              lambda x: x["backend"] in ("auto", "cpu") or x["x"].device.type != "cpu" or _ql_empty(x),
              lambda x: f"{op}: backend '{x['backend']}' needs CUDA tensors, got tensors on cpu (argument 'backend')"),
    ]


def _unpack_int4_checks() -> list[Check]:
    """csrc/ops/int4.cpp unpack_int4."""
    op = "tcgemm.unpack_int4"

    def k(x):
        return 2 * x["packed"].shape[1] if x["packed"].dim() == 2 else 0

    return [
        *_packed_checks(op, "packed", k, "twice the bytes of a row",
                        reachable=("packed_dim", "packed_dtype", "packed_stride", "packed_size")),
        *_group_scale_checks(op, "group_scale", lambda x: (x["packed"].shape[0], k(x)), "packed"),
    ]


def _gemm_int4_checks() -> list[Check]:
    """csrc/ops/int4.cpp gemm_int4."""
    op = "tcgemm.gemm_int4"
    return [
        _backend_name(op),
        *_operand(op, "a", "[M, K]", (torch.int8,)),
        _same_device(op, "b"),
        *_packed_checks(op, "b", lambda x: x["a"].shape[1], "the columns of 'a'"),
        *_group_scale_checks(op, "group_scale", lambda x: (x["b"].shape[0], x["a"].shape[1]), "a"),
        Check("k_overflow", ValueError, lambda x: x["a"].shape[1] <= _MAX_UNBLOCKED_K,
              lambda x: f"{op}: K = {x['a'].shape[1]} > {_MAX_UNBLOCKED_K} could overflow the int32 accumulator"),
        _cpu_backend(op, lambda x: x["a"].shape[0] == 0 or x["b"].shape[0] == 0 or x["a"].shape[1] == 0),
    ]


# Argument kinds the ops' schemas would reject with a bare RuntimeError ("Expected a value of type
# ..."): the Python wrappers check them first, as TypeError (or ValueError for an int out of range)
# naming the argument.
def require_tensor(op: str, name: str, value, optional: bool = False) -> None:
    if not (isinstance(value, torch.Tensor) or (optional and value is None)):
        what = "a torch.Tensor or None" if optional else "a torch.Tensor"
        raise TypeError(f"{op}: argument '{name}' must be {what}, got {type(value).__name__}")


def require_str(op: str, name: str, value) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{op}: argument '{name}' must be a str, got {type(value).__name__}")


def require_int32(op: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{op}: argument '{name}' must be an int, got {type(value).__name__}")
    if not _INT32_MIN <= value < _INT32_END:
        raise ValueError(int32_range_message(name, value))


# Per op (the schema name in torch.ops.tcgemm), its checks in the order the C++ makes them.
CHECKS: dict[str, list[Check]] = {
    "gemm": _gemm_checks(out_arg=False),
    "gemm_out": _gemm_checks(out_arg=True),
    "scaled_gemm": _scaled_gemm_checks(),
    "quantize": _quantize_checks(),
    "quantize_asym": _quantize_asym_checks(),
    "quant_linear": _quant_linear_checks(),
    "unpack_int4": _unpack_int4_checks(),
    "gemm_int4": _gemm_int4_checks(),
}

_RAISE = {ValueError: torch._check_value, TypeError: torch._check_type}


def check_args(op: str, **args: Any) -> None:
    """Raises what the C++ op raises for these arguments (all of the op's arguments, by name)."""
    for check in CHECKS[op]:
        _RAISE[check.error](check.holds(args), lambda: check.message(args))


def first_failing(op: str, **args: Any) -> Optional[Check]:
    """The check of ``op`` that rejects these arguments (the first that fails), or None."""
    for check in CHECKS[op]:
        if not check.holds(args):
            return check
    return None

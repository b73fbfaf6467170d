"""The argument checks of the GEMM and quantize ops (tcgemm.gemm, scaled_gemm, quantize,
quantize_asym), and the :class:`Check` every rule of :mod:`tcgemm._checks` is written with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from . import _scales
from ._library import BACKENDS
from .scheme import ACTIVATION_GRANULARITIES

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



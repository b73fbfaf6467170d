"""The argument checks of the ops that take a linear layer's weight: tcgemm.quant_linear, and the
packed 4-bit weights' unpack_int4 and gemm_int4 (csrc/ops/quant_linear.cpp, csrc/ops/int4.cpp)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from . import _scales
from ._checks_gemm import (
    _MAX_DIM, _MAX_UNBLOCKED_K, _QUANT_LINEAR, _QUANTIZE_DTYPES, Args, Check, _asymmetric_k, _backend_name,
    _colsum_checks, _cpu_backend, _operand, _rotate_checks, _same_device, _shape, _smooth_checks,
)
from .scheme import LAYER_ACTIVATIONS

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


def _group_table_checks(op: str, name: str, nk: Callable[[Args], Any], ref: str) -> list[Check]:
    """csrc/ops/int4.cpp check_group_table: int8 group scales or zero points (their values are
    checked on CPU tensors after these)."""
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


def _ql_scale_groups(x: Args) -> int:
    """Groups of the weight's float scales per K block of 128: 2 or 4 for a packed 4-bit weight's
    scales per 64 or 32 inputs (its table's width), else 1 (quant_linear.cpp describe_weight_scale)."""
    if not _ql_packed(x):
        return 1
    n, k, _ = _ql_nkm(x)
    return _scales.int4_scale_groups(x["weight_scale"].shape, n, k)


def _ql_weight_scale_layout(x: Args) -> Optional[str]:
    n, k, _ = _ql_nkm(x)
    if _ql_scale_groups(x) > 1:
        return _scales.PER_ROW_GROUP
    return _scales.decode_weight_scale(x["weight_scale"].shape, n, k)


def _ql_weight_scale_message(x: Args) -> str:
    n, k, _ = _ql_nkm(x)
    groups = _scales.int4_group_shapes(n, k) if _ql_packed(x) else ""
    return (f"{_QUANT_LINEAR}: argument 'weight_scale' must have shape "
            f"{_scales.weight_scale_shapes(n, _scales.scale_blocks(k))}{groups}, got {_shape(x['weight_scale'])}")


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
        Check("weight_scale_dtype", TypeError, lambda x: x["weight_scale"].dtype in _scales.INT4_GROUP_SCALE_DTYPES,
              lambda x: f"{op}: argument 'weight_scale' must have dtype torch.float32 (or, for 4-bit scales per 64 or "
              f"32 inputs, torch.bfloat16 or torch.float16), got {x['weight_scale'].dtype}"),
        Check("weight_scale_dtype_grouped", TypeError,
              lambda x: x["weight_scale"].dtype == torch.float32 or _ql_scale_groups(x) > 1,
              lambda x: f"{op}: argument 'weight_scale' must have dtype torch.float32 for scales other than 4-bit ones "
              f"per 64 or 32 inputs, got {x['weight_scale'].dtype}"),
        Check("weight_scale_shape", ValueError, lambda x: _ql_weight_scale_layout(x) is not None,
              _ql_weight_scale_message),
        _same_device(op, "weight_scale", ref="x"),
        Check("weight_group_scale_unpacked", ValueError, lambda x: x["weight_group_scale"] is None or _ql_packed(x),
              lambda x: f"{op}: argument 'weight_group_scale' is used only with a 4-bit 'weight' (torch.uint8)"),
        Check("weight_group_scale_per_channel", ValueError,
              lambda x: x["weight_group_scale"] is None or not _ql_per_block_weight(x),
              lambda x: f"{op}: argument 'weight_group_scale' (two-level scales) needs a per-channel "
              "'weight_scale' [N]"),
        *_group_table_checks(op, "weight_group_scale", lambda x: _ql_nkm(x)[:2], "x"),
        Check("weight_zero_point_unpacked", ValueError, lambda x: x["weight_zero_point"] is None or _ql_packed(x),
              lambda x: f"{op}: argument 'weight_zero_point' is used only with a 4-bit 'weight' (torch.uint8)"),
        _zero_point_alone(op, "weight_group_scale", "weight_zero_point"),
        *_group_table_checks(op, "weight_zero_point", lambda x: _ql_nkm(x)[:2], "x"),
        Check("weight_zero_point_groups", ValueError,
              lambda x: x["weight_zero_point"] is None or _ql_scale_groups(x) == 1,
              lambda x: f"{op}: argument 'weight_zero_point' needs zero points and fp32 scales per 128 inputs "
              f"('weight_scale' [N] or [N, ceil(K/128)]), got 'weight_scale' {_shape(x['weight_scale'])}"),
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


def _zero_point_alone(op: str, group_scale: str, zero_point: str) -> Check:
    """Zero points (asymmetric 4-bit weights) come with fp32 scales, not int8 group scales."""
    return Check(f"{zero_point}_with_group_scale", ValueError,
                 lambda x: x[zero_point] is None or x[group_scale] is None,
                 lambda x: f"{op}: arguments '{group_scale}' and '{zero_point}' exclude each other (asymmetric "
                 "4-bit weights have fp32 scales, no int8 group scales)")


def _unpack_int4_checks() -> list[Check]:
    """csrc/ops/int4.cpp unpack_int4."""
    op = "tcgemm.unpack_int4"

    def k(x):
        return 2 * x["packed"].shape[1] if x["packed"].dim() == 2 else 0

    return [
        *_packed_checks(op, "packed", k, "twice the bytes of a row",
                        reachable=("packed_dim", "packed_dtype", "packed_stride", "packed_size")),
        *_group_table_checks(op, "group_scale", lambda x: (x["packed"].shape[0], k(x)), "packed"),
        _zero_point_alone(op, "group_scale", "zero_point"),
        *_group_table_checks(op, "zero_point", lambda x: (x["packed"].shape[0], k(x)), "packed"),
    ]


def _gemm_int4_checks() -> list[Check]:
    """csrc/ops/int4.cpp gemm_int4."""
    op = "tcgemm.gemm_int4"
    return [
        _backend_name(op),
        *_operand(op, "a", "[M, K]", (torch.int8,)),
        _same_device(op, "b"),
        *_packed_checks(op, "b", lambda x: x["a"].shape[1], "the columns of 'a'"),
        *_group_table_checks(op, "group_scale", lambda x: (x["b"].shape[0], x["a"].shape[1]), "a"),
        Check("k_overflow", ValueError, lambda x: x["a"].shape[1] <= _MAX_UNBLOCKED_K,
              lambda x: f"{op}: K = {x['a'].shape[1]} > {_MAX_UNBLOCKED_K} could overflow the int32 accumulator"),
        _cpu_backend(op, lambda x: x["a"].shape[0] == 0 or x["b"].shape[0] == 0 or x["a"].shape[1] == 0),
    ]



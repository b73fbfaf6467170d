"""The argument checks of every op, read from their one table (tcgemm._checks.CHECKS).

For every entry of the table there are bad inputs that trigger it, and the real op (CPU tensors;
CUDA ones where the check is about a second device) and its fake (FakeTensorMode, and meta tensors)
raise the same exception type with the same message: the table's, which states the C++ one. A bad
input with several faults checks that the order of the checks is the C++ order. Good inputs near
the edges pass both. CPU tests run in CI; the real side of two-device checks needs a CUDA device.
"""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tcgemm
from tcgemm._checks import CHECKS, first_failing
from tcgemm._library import typed_error

I8, I32, U8 = torch.int8, torch.int32, torch.uint8


def _ones(*shape, dtype=torch.float32, device="cpu"):
    return torch.ones(shape, dtype=dtype, device=device)


# Valid arguments of each op (all of them, by schema name), on device `dev`.
def _gemm_base(dev):
    return dict(a=_ones(5, 7, dtype=I8, device=dev), b=_ones(7, 3, dtype=I8, device=dev), c=None, alpha=1, beta=0,
                backend="auto")


def _gemm_out_base(dev):
    return dict(_gemm_base(dev), out=torch.zeros(5, 3, dtype=I32, device=dev))


def _scaled_base(dev):  # M = 4, N = 8, K = 256: two K blocks, one N block
    return dict(a=_ones(4, 256, dtype=I8, device=dev), b=_ones(256, 8, dtype=I8, device=dev),
                scale_a=_ones(4, 1, device=dev), scale_b=_ones(8, device=dev), bias=None, out_dtype=None,
                backend="auto", zero_point_a=None, colsum_b=None)


def _quantize_base(dev):
    return dict(x=_ones(5, 300, device=dev), granularity="token", scale=None, smooth=None, rotate=False)


def _quantize_asym_base(dev):
    return dict(x=_ones(5, 300, device=dev), granularity="token", scale=None, zero_point=None, smooth=None)


def _quant_linear_base(dev):  # x [2, 3, 256], weight [N, K] = [8, 256]
    return dict(x=_ones(2, 3, 256, device=dev), weight=_ones(8, 256, dtype=I8, device=dev),
                weight_scale=_ones(8, device=dev), bias=None, activation="token", input_scale=None, smooth=None,
                backend="auto", asymmetric=False, input_zero_point=None, weight_colsum=None, weight_group_scale=None,
                rotate=False, weight_zero_point=None)


def _unpack_int4_base(dev):  # a packed 4-bit weight [N, K/2] = [8, 128]
    return dict(packed=_ones(8, 128, dtype=U8, device=dev), group_scale=None, zero_point=None)


def _gemm_int4_base(dev):  # a [4, 256] against a packed [8, 128] (K = 256)
    return dict(a=_ones(4, 256, dtype=I8, device=dev), b=_ones(8, 128, dtype=U8, device=dev), group_scale=None,
                backend="auto")


BASE = {"gemm": _gemm_base, "gemm_out": _gemm_out_base, "scaled_gemm": _scaled_base, "quantize": _quantize_base,
        "quantize_asym": _quantize_asym_base, "quant_linear": _quant_linear_base, "unpack_int4": _unpack_int4_base,
        "gemm_int4": _gemm_int4_base}


def _zeros_i32(*shape, device="cpu"):
    return torch.zeros(shape, dtype=I32, device=device)


def _big_rows(rows, cols, dev, dtype=I8):
    return torch.zeros(1, cols, dtype=dtype, device=dev).expand(rows, cols)  # a stride-0 view: no memory


def _packed_layer(**extra):
    """quant_linear with a packed 4-bit weight [8, 128] (K = 256) and per-channel scales."""
    def change(x, dev):
        return {"weight": _ones(8, 128, dtype=U8, device=dev), **{name: f(dev) for name, f in extra.items()}}
    return change


def _out_alias_a(x, dev):
    a = torch.zeros(4, 4, dtype=I8, device=dev)
    return {"a": a, "b": _ones(4, 1, dtype=I8, device=dev), "out": a.view(I32)}  # out: int32 [4, 1] over a


def _out_alias_b(x, dev):
    storage = torch.zeros(64, dtype=I8, device=dev)
    b = storage[:32].view(8, 4)  # [K, N] = [8, 4]
    return {"a": _ones(4, 8, dtype=I8, device=dev), "b": b, "out": storage.view(I32).view(4, 4)}


def _long_k(scale_a):
    def change(x, dev):
        k = 131072
        return {"a": torch.zeros(1, k, dtype=I8, device=dev), "b": torch.zeros(k, 1, dtype=I8, device=dev),
                "scale_a": scale_a(dev), "scale_b": _ones(1, device=dev)}
    return change


# Bad inputs of the gemm ops: (the check they trigger, changes to the base arguments).
_GEMM_BAD = [
    ("a_dim", lambda x, dev: {"a": x["a"][0]}),
    ("a_dim", lambda x, dev: {"a": x["a"][None]}),
    ("a_dtype", lambda x, dev: {"a": x["a"].float()}),
    ("a_dtype", lambda x, dev: {"a": x["a"].to(I32)}),
    ("a_size", lambda x, dev: {"a": _big_rows(2**30, 7, dev)}),
    ("b_dim", lambda x, dev: {"b": x["b"][None]}),
    ("b_dtype", lambda x, dev: {"b": x["b"].to(I32)}),
    ("b_size", lambda x, dev: {"b": torch.zeros(7, 1, dtype=I8, device=dev).expand(7, 2**30)}),
    ("backend_name", lambda x, dev: {"backend": "fast"}),
    ("backend_name", lambda x, dev: {"backend": ""}),
    ("b_device", lambda x, dev: {"b": x["b"].cpu()}),
    ("k_match", lambda x, dev: {"b": x["b"][:6]}),
    ("alpha_range", lambda x, dev: {"alpha": 2**31}),
    ("alpha_range", lambda x, dev: {"alpha": -(2**31) - 1}),
    ("beta_range", lambda x, dev: {"beta": -(2**31) - 1, "c": torch.zeros(5, 3, dtype=I32, device=dev)}),
    ("beta_needs_c", lambda x, dev: {"beta": 2}),
    ("c_dtype", lambda x, dev: {"c": torch.zeros(5, 3, dtype=torch.int64, device=dev), "beta": 1}),
    ("c_dtype", lambda x, dev: {"c": torch.zeros(5, 3, device=dev)}),  # checked even when beta == 0
    ("c_shape", lambda x, dev: {"c": torch.zeros(4, 3, dtype=I32, device=dev), "beta": 1}),
    ("c_shape", lambda x, dev: {"c": torch.zeros(15, dtype=I32, device=dev), "beta": 1}),
    ("c_device", lambda x, dev: {"c": torch.zeros(5, 3, dtype=I32), "beta": 1}),
    ("backend_on_cpu", lambda x, dev: {"backend": "sm80"}),
    ("backend_on_cpu", lambda x, dev: {"backend": "wmma_simple"}),
]
# Several faults: the first in the op's order is the error. gemm checks its operands, then runs
# gemm_out, which parses the backend first.
_GEMM_ONLY_BAD = [
    ("a_dim", lambda x, dev: {"a": x["a"][0], "b": x["b"].float(), "backend": "fast"}),
]
_GEMM_OUT_BAD = [
    ("backend_name", lambda x, dev: {"a": x["a"][0], "b": x["b"].float(), "backend": "fast"}),
    ("out_dtype", lambda x, dev: {"out": x["out"].float()}),
    ("out_shape", lambda x, dev: {"out": x["out"].t()}),
    ("out_device", lambda x, dev: {"out": torch.zeros(5, 3, dtype=I32)}),
    ("out_overlap", lambda x, dev: {"out": torch.zeros(1, 3, dtype=I32, device=dev).expand(5, 3)}),
    ("out_alias_a", _out_alias_a),
    ("out_alias_b", _out_alias_b),
]
_SCALED_BAD = [
    ("backend_name", lambda x, dev: {"backend": "bogus"}),
    ("backend_name", lambda x, dev: {"a": x["a"][0], "backend": "bogus"}),
    ("a_dim", lambda x, dev: {"a": x["a"][0]}),
    ("a_dtype", lambda x, dev: {"a": x["a"].to(torch.uint8)}),
    ("a_size", lambda x, dev: {"a": _big_rows(2**30, 256, dev)}),
    ("b_dim", lambda x, dev: {"b": x["b"][0]}),
    ("b_dtype", lambda x, dev: {"b": x["b"].to(torch.uint8)}),
    ("b_size", lambda x, dev: {"b": torch.zeros(256, 1, dtype=I8, device=dev).expand(256, 2**30)}),
    ("b_device", lambda x, dev: {"b": x["b"].cpu()}),
    ("k_match", lambda x, dev: {"b": x["b"][:100]}),
    ("out_dtype", lambda x, dev: {"out_dtype": torch.int32}),
    ("out_dtype", lambda x, dev: {"out_dtype": torch.float64}),
    ("scale_a_dtype", lambda x, dev: {"scale_a": x["scale_a"].half()}),
    ("scale_a_device", lambda x, dev: {"scale_a": x["scale_a"].cpu()}),
    ("scale_b_dtype", lambda x, dev: {"scale_b": x["scale_b"].double()}),
    ("scale_b_device", lambda x, dev: {"scale_b": x["scale_b"].cpu()}),
    ("scale_a_shape", lambda x, dev: {"scale_a": _ones(3, 1, device=dev)}),
    ("scale_a_shape", lambda x, dev: {"scale_a": _ones(4, device=dev)}),  # per-token must be [M, 1]
    ("scale_a_shape", lambda x, dev: {"scale_a": _ones(4, 3, device=dev)}),
    ("scale_a_shape", lambda x, dev: {"scale_a": _ones(1, 1, 1, device=dev)}),
    ("scale_b_shape", lambda x, dev: {"scale_b": _ones(7, device=dev)}),
    ("scale_b_shape", lambda x, dev: {"scale_b": _ones(2, 2, device=dev)}),
    ("scale_b_shape", lambda x, dev: {"scale_b": _ones(8, 3, device=dev)}),
    ("scale_b_shape", lambda x, dev: {"scale_b": _ones(8, 1, device=dev)}),
    ("scale_b_shape", lambda x, dev: {"scale_b": _ones(1, 1, 1, device=dev)}),
    ("bias_shape", lambda x, dev: {"bias": _ones(3, device=dev)}),
    ("bias_shape", lambda x, dev: {"bias": _ones(1, 8, device=dev)}),
    ("bias_dtype", lambda x, dev: {"bias": _ones(8, dtype=I32, device=dev)}),
    ("bias_device", lambda x, dev: {"bias": _ones(8)}),
    ("zero_point_a_dtype", lambda x, dev: {"zero_point_a": _ones(4, 1, device=dev)}),
    ("zero_point_a_dtype", lambda x, dev: {"zero_point_a": _ones(4, 1, dtype=I8, device=dev)}),
    ("zero_point_a_device", lambda x, dev: {"zero_point_a": _zeros_i32(4, 1)}),
    ("zero_point_a_shape", lambda x, dev: {"zero_point_a": _zeros_i32(4, device=dev)}),
    ("zero_point_a_shape", lambda x, dev: {"zero_point_a": _zeros_i32(4, 2, device=dev)}),
    ("zero_point_a_shape", lambda x, dev: {"zero_point_a": _zeros_i32(1, 1, 1, device=dev)}),
    ("colsum_b_unused", lambda x, dev: {"colsum_b": _zeros_i32(8, device=dev)}),
    ("colsum_b_dtype", lambda x, dev: {"zero_point_a": _zeros_i32(1, device=dev),
                                       "colsum_b": torch.zeros(8, dtype=torch.int64, device=dev)}),
    ("colsum_b_device", lambda x, dev: {"zero_point_a": _zeros_i32(1, device=dev), "colsum_b": _zeros_i32(8)}),
    ("colsum_b_shape", lambda x, dev: {"zero_point_a": _zeros_i32(device=dev), "colsum_b": _zeros_i32(7, device=dev)}),
    ("colsum_b_shape", lambda x, dev: {"zero_point_a": _zeros_i32(device=dev), "colsum_b": _zeros_i32(1, 8, device=dev)}),
    ("zero_point_a_per_block", lambda x, dev: {"zero_point_a": _zeros_i32(4, 1, device=dev),
                                               "scale_a": _ones(4, 2, device=dev)}),
    ("zero_point_a_per_block", lambda x, dev: {"zero_point_a": _zeros_i32(4, 1, device=dev),
                                               "scale_b": _ones(1, 2, device=dev)}),
    ("k_overflow_asymmetric", lambda x, dev: {"a": torch.zeros(1, 65794, dtype=I8, device=dev),
                                              "b": torch.zeros(65794, 1, dtype=I8, device=dev),
                                              "scale_a": _ones(1, device=dev), "scale_b": _ones(1, device=dev),
                                              "zero_point_a": _zeros_i32(1, device=dev)}),
    ("k_overflow", _long_k(lambda dev: _ones(1, 1, device=dev))),
    # An expand()-ed [M, ceil(K/128)] scale does not change along K: not per-block.
    ("k_overflow", _long_k(lambda dev: _ones(1, 1, device=dev).expand(1, 1024))),
    ("backend_on_cpu", lambda x, dev: {"backend": "sm90"}),
    ("backend_on_cpu", lambda x, dev: {"backend": "wmma"}),
]
_QUANTIZE_BAD = [
    ("x_dim", lambda x, dev: {"x": x["x"][None]}),
    ("x_dim", lambda x, dev: {"x": x["x"][0]}),
    ("x_dim", lambda x, dev: {"x": x["x"][None].to(I8)}),
    ("x_dtype", lambda x, dev: {"x": x["x"].to(I8)}),
    ("x_dtype", lambda x, dev: {"x": x["x"].double()}),
    ("granularity", lambda x, dev: {"granularity": "row"}),
    ("scale_dtype", lambda x, dev: {"scale": _ones(5, 1, dtype=torch.float16, device=dev)}),
    ("scale_device", lambda x, dev: {"scale": _ones(5, 1)}),
    ("scale_shape_tensor", lambda x, dev: {"granularity": "tensor", "scale": _ones(2, device=dev)}),
    ("scale_shape_tensor", lambda x, dev: {"granularity": "tensor", "scale": _ones(1, 1, 1, device=dev)}),
    ("scale_shape", lambda x, dev: {"scale": _ones(5, device=dev)}),
    ("scale_shape", lambda x, dev: {"scale": _ones(4, 1, device=dev)}),
    ("scale_shape", lambda x, dev: {"granularity": "group", "scale": _ones(5, 2, device=dev)}),
    ("smooth_dtype", lambda x, dev: {"smooth": _ones(300, dtype=torch.float16, device=dev)}),
    ("smooth_shape", lambda x, dev: {"smooth": _ones(5, device=dev)}),
    ("smooth_shape", lambda x, dev: {"smooth": _ones(300, 1, device=dev)}),
    ("smooth_device", lambda x, dev: {"smooth": _ones(300)}),
    ("rotate_dynamic", lambda x, dev: {"rotate": True, "x": _ones(5, 256, device=dev),
                                       "scale": _ones(5, 1, device=dev)}),
    ("rotate_dynamic", lambda x, dev: {"rotate": True, "smooth": _ones(300, device=dev)}),
    ("rotate_granularity", lambda x, dev: {"rotate": True, "granularity": "tensor"}),
    ("rotate_blocks", lambda x, dev: {"rotate": True}),
    ("rotate_blocks", lambda x, dev: {"rotate": True, "granularity": "group"}),
]
_QUANTIZE_ASYM_BAD = [
    ("x_dim", lambda x, dev: {"x": x["x"][0]}),
    ("x_dtype", lambda x, dev: {"x": x["x"].double()}),
    ("granularity", lambda x, dev: {"granularity": "group"}),
    ("x_dtype", lambda x, dev: {"granularity": "row", "x": x["x"].double()}),  # the dtype comes first
    ("scale_zero_point_together", lambda x, dev: {"scale": _ones(5, 1, device=dev)}),
    ("scale_zero_point_together", lambda x, dev: {"zero_point": _zeros_i32(5, 1, device=dev)}),
    ("tensor_needs_static", lambda x, dev: {"granularity": "tensor"}),
    ("scale_dtype", lambda x, dev: {"scale": _ones(5, 1, dtype=torch.float16, device=dev),
                                    "zero_point": _zeros_i32(5, 1, device=dev)}),
    ("scale_device", lambda x, dev: {"scale": _ones(5, 1), "zero_point": _zeros_i32(5, 1, device=dev)}),
    ("scale_shape_tensor", lambda x, dev: {"granularity": "tensor", "scale": _ones(2, device=dev),
                                           "zero_point": _zeros_i32(device=dev)}),
    ("scale_shape", lambda x, dev: {"scale": _ones(5, device=dev), "zero_point": _zeros_i32(5, 1, device=dev)}),
    ("zero_point_dtype", lambda x, dev: {"scale": _ones(5, 1, device=dev), "zero_point": _ones(5, 1, device=dev)}),
    ("zero_point_dtype", lambda x, dev: {"scale": _ones(5, 1, device=dev),
                                         "zero_point": torch.zeros(5, 1, dtype=I8, device=dev)}),
    ("zero_point_device", lambda x, dev: {"scale": _ones(5, 1, device=dev), "zero_point": _zeros_i32(5, 1)}),
    ("zero_point_shape_tensor", lambda x, dev: {"granularity": "tensor", "scale": _ones(device=dev),
                                                "zero_point": _zeros_i32(1, 2, device=dev)}),
    ("zero_point_shape", lambda x, dev: {"scale": _ones(5, 1, device=dev), "zero_point": _zeros_i32(5, device=dev)}),
    ("smooth_shape", lambda x, dev: {"smooth": _ones(5, device=dev)}),
    ("smooth_dtype", lambda x, dev: {"smooth": _ones(300, dtype=torch.float16, device=dev)}),
    ("smooth_device", lambda x, dev: {"smooth": _ones(300)}),
]

def _long_k_layer(**extra):
    def change(x, dev):
        k = 131072
        return {"x": torch.zeros(1, k, device=dev), "weight": torch.zeros(1, k, dtype=I8, device=dev),
                "weight_scale": _ones(1, device=dev), **{name: f(dev) for name, f in extra.items()}}
    return change


_QUANT_LINEAR_BAD = [
    ("backend_name", lambda x, dev: {"backend": "fast"}),
    ("activation", lambda x, dev: {"activation": "group"}),
    ("activation", lambda x, dev: {"activation": "tensor", "x": x["x"].to(I8)}),  # before the dtype
    ("x_dtype", lambda x, dev: {"x": x["x"].to(I8)}),
    ("x_dtype", lambda x, dev: {"x": x["x"].double()}),
    ("x_dim", lambda x, dev: {"x": _ones(device=dev)}),
    ("weight_dim", lambda x, dev: {"weight": x["weight"][0]}),
    ("weight_dtype", lambda x, dev: {"weight": x["weight"].to(torch.int32)}),
    ("weight_packed_dim", lambda x, dev: {"weight": _ones(128, dtype=U8, device=dev)}),
    ("weight_packed_k_even", lambda x, dev: {"x": _ones(2, 255, device=dev), "weight": _ones(8, 127, dtype=U8,
                                                                                               device=dev)}),
    ("weight_packed_shape", lambda x, dev: {"weight": x["weight"].to(U8)}),  # [N, K] where [N, K/2] is packed
    ("weight_packed_stride", lambda x, dev: {"weight": _ones(128, 8, dtype=U8, device=dev).t()}),
    ("weight_packed_size", lambda x, dev: {"weight": _big_rows(2**30, 128, dev, U8)}),
    ("weight_group_scale_unpacked", lambda x, dev: {"weight_group_scale": _ones(8, 2, dtype=I8, device=dev)}),
    ("weight_group_scale_per_channel", _packed_layer(weight_scale=lambda dev: _ones(8, 2, device=dev),
                                                     weight_group_scale=lambda dev: _ones(8, 2, dtype=I8,
                                                                                          device=dev))),
    ("weight_group_scale_dtype", _packed_layer(weight_group_scale=lambda dev: _ones(8, 2, device=dev))),
    ("weight_group_scale_device", _packed_layer(weight_group_scale=lambda dev: _ones(8, 2, dtype=I8))),
    ("weight_group_scale_shape", _packed_layer(weight_group_scale=lambda dev: _ones(8, 3, dtype=I8, device=dev))),
    ("weight_zero_point_unpacked", lambda x, dev: {"weight_zero_point": _ones(8, 2, dtype=I8, device=dev)}),
    ("weight_zero_point_with_group_scale", _packed_layer(weight_group_scale=lambda dev: _ones(8, 2, dtype=I8,
                                                                                              device=dev),
                                                         weight_zero_point=lambda dev: _ones(8, 2, dtype=I8,
                                                                                             device=dev))),
    ("weight_zero_point_dtype", _packed_layer(weight_zero_point=lambda dev: _ones(8, 2, device=dev))),
    ("weight_zero_point_device", _packed_layer(weight_zero_point=lambda dev: _ones(8, 2, dtype=I8))),
    ("weight_zero_point_shape", _packed_layer(weight_zero_point=lambda dev: _ones(8, 3, dtype=I8, device=dev))),
    # fp32 scales per 32 inputs ([N, ceil(K/32)] = [8, 8]) with zero points, which are per 128 inputs
    ("weight_zero_point_groups", _packed_layer(weight_scale=lambda dev: _ones(8, 8, device=dev),
                                               weight_zero_point=lambda dev: _ones(8, 2, dtype=I8, device=dev))),
    ("weight_size", lambda x, dev: {"weight": _big_rows(2**30, 256, dev)}),
    ("weight_device", lambda x, dev: {"weight": x["weight"].cpu()}),
    ("k_match", lambda x, dev: {"x": _ones(2, 255, device=dev)}),
    ("weight_scale_dtype", lambda x, dev: {"weight_scale": _ones(8, dtype=I32, device=dev)}),
    ("weight_scale_dtype", lambda x, dev: {"weight_scale": _ones(8, dtype=torch.float64, device=dev)}),
    ("weight_scale_dtype", _packed_layer(weight_scale=lambda dev: _ones(8, 8, dtype=I8, device=dev))),
    # bf16 / fp16 only for a 4-bit weight's scales per 64 or 32 inputs: not per channel, not per 128
    ("weight_scale_dtype_grouped", lambda x, dev: {"weight_scale": _ones(8, dtype=torch.float16, device=dev)}),
    ("weight_scale_dtype_grouped", lambda x, dev: {"weight_scale": _ones(8, 4, dtype=torch.bfloat16, device=dev)}),
    ("weight_scale_dtype_grouped", _packed_layer(weight_scale=lambda dev: _ones(8, dtype=torch.bfloat16, device=dev))),
    ("weight_scale_dtype_grouped", _packed_layer(weight_scale=lambda dev: _ones(8, 2, dtype=torch.float16,
                                                                                device=dev))),
    # several faults: the dtype of a table that is no 4-bit one per 64 or 32 inputs before its shape
    ("weight_scale_dtype_grouped", _packed_layer(weight_scale=lambda dev: _ones(8, 5, dtype=torch.bfloat16,
                                                                                device=dev))),
    ("weight_scale_shape", lambda x, dev: {"weight_scale": _ones(7, device=dev)}),
    ("weight_scale_shape", lambda x, dev: {"weight_scale": _ones(1, 8, device=dev)}),  # per-channel is [N]
    ("weight_scale_shape", lambda x, dev: {"weight_scale": _ones(8, 3, device=dev)}),
    ("weight_scale_shape", lambda x, dev: {"weight_scale": _ones(1, 1, 8, device=dev)}),
    ("weight_scale_shape", lambda x, dev: {"weight_scale": _ones(8, 4, device=dev)}),  # groups of 64: 4-bit only
    ("weight_scale_shape", _packed_layer(weight_scale=lambda dev: _ones(8, 5, device=dev))),  # names 64 and 32
    ("weight_scale_shape", _packed_layer(weight_scale=lambda dev: _ones(7, 8, device=dev))),
    ("weight_scale_device", lambda x, dev: {"weight_scale": _ones(8)}),
    ("bias_shape", lambda x, dev: {"bias": _ones(7, device=dev)}),
    ("bias_shape", lambda x, dev: {"bias": _ones(1, 8, device=dev)}),
    ("bias_dtype", lambda x, dev: {"bias": _ones(8, dtype=torch.int32, device=dev)}),
    ("bias_device", lambda x, dev: {"bias": _ones(8)}),
    ("input_scale_missing", lambda x, dev: {"activation": "static"}),
    ("input_scale_unused", lambda x, dev: {"input_scale": _ones(device=dev)}),
    ("input_scale_unused", lambda x, dev: {"input_scale": _ones(device=dev), "activation": "block"}),
    ("input_scale_dtype", lambda x, dev: {"activation": "static", "input_scale": _ones(1, dtype=torch.float64,
                                                                                        device=dev)}),
    ("input_scale_shape", lambda x, dev: {"activation": "static", "input_scale": _ones(2, device=dev)}),
    ("input_scale_shape", lambda x, dev: {"activation": "static", "input_scale": _ones(1, 1, 1, device=dev)}),
    ("input_scale_device", lambda x, dev: {"activation": "static", "input_scale": _ones(1)}),
    ("smooth_dtype", lambda x, dev: {"smooth": _ones(256, dtype=torch.bfloat16, device=dev)}),
    ("smooth_shape", lambda x, dev: {"smooth": _ones(255, device=dev)}),
    ("smooth_shape", lambda x, dev: {"smooth": _ones(1, 256, device=dev)}),
    ("smooth_device", lambda x, dev: {"smooth": _ones(256)}),
    ("asymmetric_args_unused", lambda x, dev: {"input_zero_point": _zeros_i32(device=dev)}),
    ("asymmetric_args_unused", lambda x, dev: {"weight_colsum": _zeros_i32(8, device=dev)}),
    ("asymmetric_block", lambda x, dev: {"asymmetric": True, "activation": "block"}),
    ("asymmetric_weight_block", lambda x, dev: {"asymmetric": True, "weight_scale": _ones(1, 2, device=dev)}),
    ("input_zero_point_missing", lambda x, dev: {"asymmetric": True, "activation": "static",
                                                 "input_scale": _ones(device=dev)}),
    ("input_zero_point_unused", lambda x, dev: {"asymmetric": True, "input_zero_point": _zeros_i32(device=dev)}),
    ("input_zero_point_dtype", lambda x, dev: {"asymmetric": True, "activation": "static",
                                               "input_scale": _ones(device=dev), "input_zero_point": _ones(device=dev)}),
    ("input_zero_point_shape", lambda x, dev: {"asymmetric": True, "activation": "static",
                                               "input_scale": _ones(device=dev),
                                               "input_zero_point": _zeros_i32(2, device=dev)}),
    ("input_zero_point_device", lambda x, dev: {"asymmetric": True, "activation": "static",
                                                "input_scale": _ones(device=dev), "input_zero_point": _zeros_i32()}),
    ("weight_colsum_dtype", lambda x, dev: {"asymmetric": True, "weight_colsum": _ones(8, device=dev)}),
    ("weight_colsum_device", lambda x, dev: {"asymmetric": True, "weight_colsum": _zeros_i32(8)}),
    ("weight_colsum_shape", lambda x, dev: {"asymmetric": True, "weight_colsum": _zeros_i32(7, device=dev)}),
    ("k_overflow_asymmetric", lambda x, dev: {"x": torch.zeros(1, 65794, device=dev), "asymmetric": True,
                                              "weight": torch.zeros(1, 65794, dtype=I8, device=dev),
                                              "weight_scale": _ones(1, device=dev)}),
    ("k_overflow", _long_k_layer()),
    ("k_overflow", _long_k_layer(input_scale=lambda dev: _ones(device=dev), activation=lambda dev: "static")),
    # An expand()-ed [N, ceil(K/128)] scale does not change along K: not per-block.
    ("k_overflow", _long_k_layer(weight_scale=lambda dev: _ones(1, 1, device=dev).expand(1, 1024))),
    ("rotate_dynamic", lambda x, dev: {"rotate": True, "activation": "static", "input_scale": _ones(1, device=dev)}),
    ("rotate_dynamic", lambda x, dev: {"rotate": True, "smooth": _ones(256, device=dev)}),
    ("rotate_dynamic", lambda x, dev: {"rotate": True, "asymmetric": True}),
    ("rotate_blocks", lambda x, dev: {"rotate": True, "x": _ones(3, 200, device=dev),
                                      "weight": _ones(8, 200, dtype=I8, device=dev)}),
    ("backend_on_cpu", lambda x, dev: {"backend": "sm90"}),
    ("backend_on_cpu", lambda x, dev: {"backend": "skinny"}),
]
def _group_scale_bad(name, n, groups):
    """Bad int8 group scales [n, groups] for the argument `name`: float, on the CPU, transposed."""
    return [
        (f"{name}_dtype", lambda x, dev: {name: _ones(n, groups, device=dev)}),
        (f"{name}_device", lambda x, dev: {name: _ones(n, groups, dtype=I8)}),
        (f"{name}_shape", lambda x, dev: {name: _ones(groups, n, dtype=I8, device=dev)}),
    ]


_UNPACK_INT4_BAD = [
    ("packed_packed_dim", lambda x, dev: {"packed": _ones(128, dtype=U8, device=dev)}),
    ("packed_packed_dtype", lambda x, dev: {"packed": _ones(8, 128, dtype=I8, device=dev)}),
    ("packed_packed_stride", lambda x, dev: {"packed": _ones(128, 8, dtype=U8, device=dev).t()}),
    ("packed_packed_size", lambda x, dev: {"packed": _big_rows(2**30, 128, dev, U8)}),
    *_group_scale_bad("group_scale", 8, 2),
    ("zero_point_with_group_scale", lambda x, dev: {"group_scale": _ones(8, 2, dtype=I8, device=dev),
                                                    "zero_point": _ones(8, 2, dtype=I8, device=dev)}),
    *_group_scale_bad("zero_point", 8, 2),
]
_GEMM_INT4_BAD = [
    ("backend_name", lambda x, dev: {"backend": "fast"}),
    ("a_dim", lambda x, dev: {"a": x["a"][0]}),
    ("a_dtype", lambda x, dev: {"a": x["a"].to(U8)}),
    ("a_size", lambda x, dev: {"a": _big_rows(2**30, 256, dev)}),
    ("b_device", lambda x, dev: {"b": x["b"].cpu()}),
    ("b_packed_dim", lambda x, dev: {"b": x["b"][0]}),
    ("b_packed_dtype", lambda x, dev: {"b": x["b"].to(I8)}),
    ("b_packed_k_even", lambda x, dev: {"a": _ones(4, 255, dtype=I8, device=dev), "b": _ones(8, 127, dtype=U8,
                                                                                              device=dev)}),
    ("b_packed_shape", lambda x, dev: {"b": _ones(8, 256, dtype=U8, device=dev)}),
    ("b_packed_stride", lambda x, dev: {"b": _ones(128, 8, dtype=U8, device=dev).t()}),
    ("b_packed_size", lambda x, dev: {"b": _big_rows(2**30, 128, dev, U8)}),
    *_group_scale_bad("group_scale", 8, 2),
    ("k_overflow", lambda x, dev: {"a": torch.zeros(1, 131072, dtype=I8, device=dev),
                                   "b": torch.zeros(1, 65536, dtype=U8, device=dev)}),
    ("backend_on_cpu", lambda x, dev: {"backend": "sm90"}),
]
BAD = {
    "unpack_int4": _UNPACK_INT4_BAD,
    "gemm_int4": _GEMM_INT4_BAD,
    "quant_linear": _QUANT_LINEAR_BAD,
    "gemm": _GEMM_BAD + _GEMM_ONLY_BAD,
    "gemm_out": _GEMM_BAD + _GEMM_OUT_BAD,
    "scaled_gemm": _SCALED_BAD,
    "quantize": _QUANTIZE_BAD,
    "quantize_asym": _QUANTIZE_ASYM_BAD,
}
# Checks about a second device: the arguments live on CUDA and one of them on the CPU.
TWO_DEVICE_CHECKS = {"b_device", "c_device", "out_device", "scale_a_device", "scale_b_device", "bias_device",
                     "scale_device", "weight_device", "weight_scale_device", "input_scale_device", "smooth_device",
                     "zero_point_a_device", "colsum_b_device", "zero_point_device", "input_zero_point_device",
                     "weight_colsum_device", "weight_group_scale_device", "group_scale_device",
                     "weight_zero_point_device"}
# Checks meta tensors cannot trigger: they concern the CPU.
CPU_ONLY_CHECKS = {"backend_on_cpu"}

CASES = [
    pytest.param(op, name, change, id=f"{op}-{name}-{i}")
    for op, bad in BAD.items()
    for i, (name, change) in enumerate(bad)
]
# The real op of a two-device check needs a CUDA device; its fake runs anywhere.
REAL_CASES = [
    pytest.param(*case.values, id=case.id, marks=pytest.mark.gpu if case.values[1] in TWO_DEVICE_CHECKS else ())
    for case in CASES
]


def _args(op, change, dev):
    args = BASE[op](dev)
    args.update(change(args, dev))
    return args


def _call(op, args):
    """(exception type, message) that op(**args) raises, or None. The type is the one tcgemm's
    Python API raises: a compiled op's errors reach Python as RuntimeError (torch's stable ABI),
    which the API turns back into the ValueError or TypeError of the failed check (typed_error)."""
    try:
        getattr(torch.ops.tcgemm, op).default(**args)
    except RuntimeError as exc:
        typed = typed_error(exc)
        return type(typed), str(typed)
    except Exception as exc:  # noqa: BLE001 - the type is what is compared
        return type(exc), str(exc)
    return None


def _expected(op, name, args):
    check = first_failing(op, **args)
    assert check is not None and check.name == name, (
        f"the bad input triggers {check and check.name!r} of {op}'s table, not {name!r}"
    )
    return check.error, check.message(args)


def test_every_check_has_a_bad_input():
    assert set(CHECKS) == set(BAD)
    for op, checks in CHECKS.items():
        names = [c.name for c in checks]
        assert len(names) == len(set(names)), f"{op}: duplicate check names"
        assert set(names) == {name for name, _ in BAD[op]}, f"{op}: checks without a bad input (or the reverse)"
    assert TWO_DEVICE_CHECKS | CPU_ONLY_CHECKS <= {c.name for checks in CHECKS.values() for c in checks}


def _device(name):
    return "cuda" if name in TWO_DEVICE_CHECKS else "cpu"


@pytest.mark.parametrize("op, name, change", CASES)
def test_fake_and_meta_raise_as_the_table_says(op, name, change):
    dev = _device(name)
    with FakeTensorMode():  # fake CUDA tensors need no GPU
        args = _args(op, change, dev)
        expected = _expected(op, name, args)
        fake = _call(op, args)
    assert fake == expected, f"fake: {fake}\ntable: {expected}"

    if name not in TWO_DEVICE_CHECKS | CPU_ONLY_CHECKS:
        args = _args(op, change, "meta")
        expected = _expected(op, name, args)
        meta = _call(op, args)
        assert meta == expected, f"meta: {meta}\ntable: {expected}"


@pytest.mark.parametrize("op, name, change", REAL_CASES)
def test_real_op_and_fake_raise_the_same(op, name, change):
    dev = _device(name)
    args = _args(op, change, dev)
    expected = _expected(op, name, args)
    real = _call(op, args)
    assert real == expected, f"real op: {real}\n table: {expected}"

    with FakeTensorMode():
        fake = _call(op, _args(op, change, dev))
    assert fake == real

    if name not in TWO_DEVICE_CHECKS | CPU_ONLY_CHECKS:
        assert _call(op, _args(op, change, "meta")) == real


def test_compiled_op_errors_keep_their_message_and_the_api_their_type():
    a, b = torch.ones(2, 3, dtype=torch.float32), torch.ones(3, 4, dtype=I8)
    message = "tcgemm.gemm: argument 'a' must have dtype torch.int8 or torch.uint8, got torch.float32"
    with pytest.raises(RuntimeError) as raw:  # torch's stable ABI: every C++ error is a RuntimeError
        torch.ops.tcgemm.gemm.default(a, b)
    assert str(raw.value) == message
    with pytest.raises(TypeError) as api:
        tcgemm.gemm(a, b)
    assert str(api.value) == message
    with pytest.raises(ValueError, match=r"^tcgemm\.gemm: K mismatch"):
        tcgemm.gemm(torch.ones(2, 3, dtype=I8), b[:2])
    # Another error with the same words is not retyped: only the last one the library raised is.
    assert type(typed_error(RuntimeError("tcgemm.gemm: K mismatch"))) is RuntimeError


# Inputs at the edges of the checks that every implementation accepts.
GOOD = [
    ("quant_linear", _packed_layer(weight_group_scale=lambda dev: torch.full((8, 2), 16, dtype=I8, device=dev))),
    ("quant_linear", _packed_layer(weight_scale=lambda dev: _ones(8, 2, device=dev), activation=lambda dev: "block")),
    ("quant_linear", _packed_layer(asymmetric=lambda dev: True)),
    ("quant_linear", _packed_layer(weight_scale=lambda dev: _ones(8, 2, device=dev),
                                   weight_zero_point=lambda dev: torch.full((8, 2), -8, dtype=I8, device=dev))),
    # fp32 scales per group of 64 and 32 inputs of a 4-bit weight (K = 256), with every activation
    ("quant_linear", _packed_layer(weight_scale=lambda dev: _ones(8, 4, device=dev))),
    ("quant_linear", _packed_layer(weight_scale=lambda dev: _ones(8, 8, device=dev), activation=lambda dev: "block")),
    ("quant_linear", _packed_layer(weight_scale=lambda dev: _ones(8, 8, device=dev), activation=lambda dev: "static",
                                   input_scale=lambda dev: _ones(device=dev))),
    # the same in bf16 and fp16 (read in place, converted to fp32 exactly)
    ("quant_linear", _packed_layer(weight_scale=lambda dev: _ones(8, 4, dtype=torch.bfloat16, device=dev))),
    ("quant_linear", _packed_layer(weight_scale=lambda dev: _ones(8, 8, dtype=torch.float16, device=dev),
                                   activation=lambda dev: "block")),
    ("unpack_int4", lambda x, dev: {"group_scale": _ones(8, 2, dtype=I8, device=dev)}),
    ("unpack_int4", lambda x, dev: {"zero_point": torch.full((8, 2), 7, dtype=I8, device=dev)}),
    ("gemm_int4", lambda x, dev: {"group_scale": _ones(8, 2, dtype=I8, device=dev)}),
    ("gemm_int4", lambda x, dev: {"a": _ones(0, 256, dtype=I8, device=dev), "backend": "sm90"}),  # nothing to compute
    ("gemm", lambda x, dev: {"a": _ones(0, 7, dtype=I8, device=dev), "backend": "sm80"}),  # nothing to compute
    ("gemm", lambda x, dev: {"alpha": 2**31 - 1, "beta": -(2**31), "c": torch.zeros(5, 3, dtype=I32, device=dev)}),
    ("gemm", lambda x, dev: {"c": torch.zeros(1, 3, dtype=I32, device=dev).expand(5, 3), "beta": 1}),
    ("gemm_out", lambda x, dev: {"c": x["out"], "beta": 1}),  # out may be c
    ("gemm_out", lambda x, dev: {"out": x["out"].t().contiguous().t()}),
    ("scaled_gemm", lambda x, dev: {"scale_a": _ones(4, 2, device=dev), "scale_b": _ones(1, 2, device=dev)}),
    ("scaled_gemm", lambda x, dev: {"scale_a": _ones(device=dev), "scale_b": _ones(1, 8, device=dev)}),
    ("scaled_gemm", lambda x, dev: {"scale_a": _ones(1, 1, device=dev), "scale_b": _ones(8, 2, device=dev)}),
    ("scaled_gemm", lambda x, dev: {"bias": _ones(8, dtype=torch.bfloat16, device=dev), "out_dtype": torch.float16}),
    ("scaled_gemm", lambda x, dev: {"a": _ones(4, 0, dtype=I8, device=dev), "b": _ones(0, 8, dtype=I8, device=dev),
                                    "backend": "sm90"}),  # K = 0: out = bias, no backend runs
    ("scaled_gemm", _long_k(lambda dev: _ones(1, 1024, device=dev))),
    ("quant_linear", lambda x, dev: {"weight_scale": _ones(1, 2, device=dev), "activation": "block"}),  # 128x128
    ("quant_linear", lambda x, dev: {"weight_scale": _ones(8, 2, device=dev)}),
    ("quant_linear", lambda x, dev: {"x": _ones(256, device=dev), "bias": _ones(8, dtype=torch.float16, device=dev)}),
    ("quant_linear", lambda x, dev: {"x": _ones(2, 0, device=dev), "weight": _ones(8, 0, dtype=I8, device=dev),
                                     "weight_scale": _ones(1, 0, device=dev), "backend": "sm90"}),  # K = 0
    ("quant_linear", _long_k_layer(weight_scale=lambda dev: _ones(1, 1024, device=dev))),
    ("quant_linear", lambda x, dev: {"activation": "static", "input_scale": _ones(1, 1, device=dev),
                                     "smooth": _ones(256, device=dev)}),
    ("scaled_gemm", lambda x, dev: {"zero_point_a": _zeros_i32(device=dev), "colsum_b": _zeros_i32(8, device=dev)}),
    ("scaled_gemm", lambda x, dev: {"zero_point_a": _zeros_i32(4, 1, device=dev), "scale_a": _ones(1, device=dev)}),
    ("quant_linear", lambda x, dev: {"asymmetric": True, "weight_colsum": _zeros_i32(8, device=dev)}),
    ("quant_linear", lambda x, dev: {"asymmetric": True, "activation": "static", "input_scale": _ones(1, device=dev),
                                     "input_zero_point": _zeros_i32(1, 1, device=dev)}),
    ("quantize_asym", lambda x, dev: {"smooth": _ones(300, device=dev)}),
    ("quantize_asym", lambda x, dev: {"granularity": "tensor", "scale": _ones(1, 1, device=dev),
                                      "zero_point": _zeros_i32(1, device=dev)}),
    ("quantize_asym", lambda x, dev: {"scale": _ones(5, 1, device=dev), "zero_point": _zeros_i32(5, 1, device=dev)}),
    ("quantize", lambda x, dev: {"granularity": "group", "smooth": _ones(300, device=dev)}),
    ("quantize", lambda x, dev: {"granularity": "tensor", "scale": _ones(1, 1, device=dev)}),
    ("quantize", lambda x, dev: {"granularity": "group", "scale": _ones(5, 3, device=dev)}),
    ("quantize", lambda x, dev: {"x": _ones(4, 0, dtype=torch.bfloat16, device=dev), "granularity": "group",
                                 "scale": _ones(4, 0, device=dev)}),
]


@pytest.mark.parametrize("op, change", GOOD, ids=[f"{op}-{i}" for i, (op, _) in enumerate(GOOD)])
def test_edge_inputs_pass_everywhere(op, change):
    args = _args(op, change, "cpu")
    assert first_failing(op, **args) is None
    real = getattr(torch.ops.tcgemm, op).default(**args)
    with FakeTensorMode():
        fake_args = _args(op, change, "cpu")
        fake = getattr(torch.ops.tcgemm, op).default(**fake_args)
    meta = getattr(torch.ops.tcgemm, op).default(**_args(op, change, "meta"))
    flat = lambda r: [] if r is None else [r] if isinstance(r, torch.Tensor) else list(r)  # noqa: E731
    for got in (fake, meta):
        assert [(t.shape, t.dtype) for t in flat(got)] == [(t.shape, t.dtype) for t in flat(real)]


def test_backends_come_from_the_library():
    assert tcgemm.BACKENDS == tuple(torch.ops.tcgemm.backend_names().split(","))
    assert tcgemm.BACKENDS[:2] == ("auto", "cpu")
    assert set(tcgemm.available_backends("cpu")) <= set(tcgemm.BACKENDS)


@pytest.mark.gpu
def test_cuda_backends_come_from_the_library():
    assert set(tcgemm.available_backends("cuda")) <= set(tcgemm.BACKENDS)


# ---------------------------------------------------------------------------------------------
# Symbolic shapes: the fakes trace with dynamic sizes (no specialization error, no graph break).


def test_compile_dynamic_shapes_cpu():
    @torch.compile(fullgraph=True, dynamic=True, backend="aot_eager")
    def f(x, w, c, out):
        qx, sx = tcgemm.quantize(x, "group")
        qw, sw = tcgemm.quantize(w, "token")
        y_block = tcgemm.scaled_gemm(qx, qw.t(), sx, sw.reshape(-1), None, torch.float32)
        qt, st = tcgemm.quantize(x, "tensor")
        y_token = tcgemm.scaled_gemm(qt, qw.t(), st, sw.reshape(1, -1), None, torch.float32)
        d = tcgemm.gemm(qx, qw.t(), c, alpha=2, beta=-1)
        tcgemm.int8_gemm(qx, qw.t(), out=out)
        return y_block, y_token, d

    gen = torch.Generator().manual_seed(0)
    for m, n, k in [(6, 5, 300), (9, 7, 260), (3, 11, 1000)]:
        x = torch.randn(m, k, generator=gen)
        w = torch.randn(n, k, generator=gen)
        c = torch.randint(-100, 100, (m, n), dtype=I32, generator=gen)
        out = torch.empty(m, n, dtype=I32)
        y_block, y_token, d = f(x, w, c, out)
        qx, sx = tcgemm.quantize(x, "group")
        qw, sw = tcgemm.quantize(w, "token")
        assert torch.equal(y_block, tcgemm.scaled_gemm(qx, qw.t(), sx, sw.reshape(-1), None, torch.float32))
        assert torch.equal(d, tcgemm.gemm(qx, qw.t(), c, alpha=2, beta=-1))
        assert torch.equal(out, tcgemm.int8_gemm(qx, qw.t()))
        assert y_token.shape == (m, n)

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

from typing import Any, Optional

import torch

from ._checks_gemm import (
    _INT32_END, _INT32_MIN, Check, _gemm_checks, _quantize_asym_checks, _quantize_checks, _scaled_gemm_checks,
    int32_range_message,
)
from ._checks_linear import _gemm_int4_checks, _quant_linear_checks, _unpack_int4_checks

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


"""Loads the compiled library (tcgemm._C registers torch.ops.tcgemm) and reads what it reports."""

from __future__ import annotations

import torch

try:
    from . import _C  # noqa: F401  (loading the library registers torch.ops.tcgemm)
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "tcgemm's compiled extension (tcgemm._C) is missing or was built for another torch: "
        "reinstall with `pip install --no-build-isolation -e .`"
    ) from exc

# Every backend name the ops take, in the library's order ("auto" first).
BACKENDS: tuple[str, ...] = tuple(torch.ops.tcgemm.backend_names().split(","))

# What each backend's kernels run, from dispatch's capability table: backend name -> the
# epilogue families ("int32", "scaled", "per_block") it has kernels for, whatever the device.
BACKEND_EPILOGUES: dict[str, frozenset[str]] = {
    name: frozenset(families.split("+")) if families else frozenset()
    for name, families in (entry.split("=") for entry in torch.ops.tcgemm.backend_epilogues().split(","))
}


_ERROR_TYPES = {1: ValueError, 2: TypeError}


def typed_error(exc: RuntimeError) -> Exception:
    """The exception a tcgemm op's failed check stands for. The ops are bound through torch's stable
    ABI, which gives every C++ error to Python as a RuntimeError with its message; the library
    records what kind of check failed (csrc/ops/torch_api.h), and this gives the ValueError or
    TypeError back, with the same message. Any other error (a CUDA error, an internal one) is
    ``exc`` itself."""
    message = str(exc)
    error = _ERROR_TYPES.get(_C.error_kind(message))
    return exc if error is None else error(message)

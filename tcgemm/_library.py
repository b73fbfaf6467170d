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

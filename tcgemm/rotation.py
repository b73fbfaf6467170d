"""Block Hadamard rotation of a layer's input features (``QuantScheme(rotate=True)``).

``R`` is block diagonal with one orthonormal Hadamard matrix ``H`` of order 128 (``SCALE_BLOCK``,
Sylvester's construction, entries ``+-1/sqrt(128)``) per block of 128 input features. ``H`` is
symmetric and its own inverse, so ``R`` is too, and ``x W^T = (x R)(W R)^T``: a rotated layer
quantizes ``W R`` (once) and ``x R`` (per call) instead of ``W`` and ``x``. The rotation spreads
each input feature over its block of 128, so an outlier feature no longer sets the scale of a
whole token or weight group alone, and it keeps every 1x128 group of scales aligned with a block.

The input's rotation is a matrix product per call (``rotate_blocks``, in fp32), not fused into the
quantization kernel. Accuracy and cost: ``docs/design/int4.md``.
"""

from __future__ import annotations

from typing import Optional

import torch

from ._scales import SCALE_BLOCK

__all__ = ["hadamard", "rotate_blocks", "rotate_hessian"]

_CACHE: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def hadamard(device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The orthonormal Hadamard matrix of order ``SCALE_BLOCK`` (symmetric, its own inverse)."""
    key = (torch.device(device) if device is not None else torch.device("cpu"), dtype)
    h = _CACHE.get(key)
    if h is None:
        h = torch.ones(1, 1, dtype=torch.float64)
        while h.shape[0] < SCALE_BLOCK:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        h = (h / SCALE_BLOCK ** 0.5).to(device=key[0], dtype=dtype)
        _CACHE[key] = h
    return h


def rotate_blocks(x: torch.Tensor, h: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x R``: each block of ``SCALE_BLOCK`` values of the last dimension times ``H``, computed in
    fp32 (fp64 for fp64 ``x``) and returned in ``x``'s dtype. The last dimension must be a multiple
    of ``SCALE_BLOCK``. Applied twice it gives ``x`` back (up to rounding). ``h``: ``hadamard()``
    already on ``x``'s device in the compute dtype (a layer's buffer: nothing is allocated or
    copied to the device here, e.g. while a CUDA graph is captured)."""
    k = x.shape[-1]
    if k % SCALE_BLOCK:
        raise ValueError(f"tcgemm.rotation.rotate_blocks: the last dimension must be a multiple of {SCALE_BLOCK}, "
                         f"got shape {list(x.shape)}")
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    if h is None:
        h = hadamard(x.device, dtype)
    blocks = x.to(dtype).reshape(*x.shape[:-1], k // SCALE_BLOCK, SCALE_BLOCK)
    return (blocks @ h).reshape(x.shape).to(x.dtype)


def rotate_hessian(h: torch.Tensor) -> torch.Tensor:
    """``R H R`` for second moments ``H = sum x^T x`` [K, K]: those of the rotated input ``x R``."""
    return rotate_blocks(rotate_blocks(h).t()).t()

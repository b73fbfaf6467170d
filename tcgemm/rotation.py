"""Block Hadamard rotation of a layer's input features (``QuantScheme(rotate=True)``).

``R`` is block diagonal with one orthonormal Hadamard matrix ``H`` of order 128 (``SCALE_BLOCK``,
Sylvester's construction, entries ``+-1/sqrt(128)``) per block of 128 input features. ``H`` is
symmetric and its own inverse, so ``R`` is too, and ``x W^T = (x R)(W R)^T``: a rotated layer
quantizes ``W R`` (once) and ``x R`` (per call) instead of ``W`` and ``x``. The rotation spreads
each input feature over its block of 128, so an outlier feature no longer sets the scale of a
whole token or weight group alone, and it keeps every 1x128 group of scales aligned with a block.

Every path rotates in one order, so the rotated values are the same bits everywhere: fp32
butterflies ``(a, b) -> (a + b, a - b)`` of strides 1, 2, ..., 64 within each block, then each value
times ``1/sqrt(128)`` rounded to fp32 (:func:`rotate_blocks`; ``csrc/common/quantize_params.h``
``hadamard_block``). A rotated layer's input is rotated inside the activation quantization
(``tcgemm.quantize(..., rotate=True)``, ``tcgemm.quant_linear(..., rotate=True)``): on the GPU the
lanes that hold a block exchange values with shuffles, and ``x R`` is never written to memory.
Accuracy and cost: ``docs/design/int4.md``.
"""

from __future__ import annotations

import torch

from ._scales import SCALE_BLOCK

__all__ = ["hadamard", "rotate_blocks", "rotate_hessian"]

_CACHE: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def hadamard(device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The orthonormal Hadamard matrix of order ``SCALE_BLOCK`` (symmetric, its own inverse).

    Args:
        device: where the [128, 128] matrix is returned (None: the CPU); cached per device and dtype.
        dtype: its dtype (entries ``+-1/sqrt(128)`` rounded to it).
    """
    key = (torch.device(device) if device is not None else torch.device("cpu"), dtype)
    h = _CACHE.get(key)
    if h is None:
        h = torch.ones(1, 1, dtype=torch.float64)
        while h.shape[0] < SCALE_BLOCK:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        h = (h / SCALE_BLOCK ** 0.5).to(device=key[0], dtype=dtype)
        _CACHE[key] = h
    return h


def rotate_blocks(x: torch.Tensor) -> torch.Tensor:
    """``x R``: each block of ``SCALE_BLOCK`` values of the last dimension times ``H``, computed in
    fp32 (fp64 for fp64 ``x``) in the order the kernels use (module docstring) and returned in
    ``x``'s dtype: for an fp32 ``x`` the values ``tcgemm.quantize(x, rotate=True)`` quantizes. The
    last dimension must be a multiple of ``SCALE_BLOCK``. Applied twice it gives ``x`` back (up to
    rounding)."""
    k = x.shape[-1]
    if k % SCALE_BLOCK:
        raise ValueError(f"tcgemm.rotation.rotate_blocks: the last dimension must be a multiple of {SCALE_BLOCK}, "
                         f"got shape {list(x.shape)}")
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    lead = x.shape[:-1]
    y = x.to(dtype)
    h = 1
    while h < SCALE_BLOCK:  # element i with element i + h (i's bit h clear): the sum, then the difference
        pairs = y.reshape(*lead, k // (2 * h), 2, h)
        a, b = pairs.select(-2, 0), pairs.select(-2, 1)
        y = torch.stack((a + b, a - b), dim=-2).reshape(*lead, k)
        h *= 2
    norm = torch.tensor(SCALE_BLOCK ** -0.5, dtype=dtype)  # kHadamardNorm in fp32 (a scalar on any device)
    return (y * norm).to(x.dtype)


def rotate_hessian(h: torch.Tensor) -> torch.Tensor:
    """``R H R`` for second moments ``H = sum x^T x`` [K, K]: those of the rotated input ``x R``.

    Args:
        h: the second moments [K, K], K a multiple of ``SCALE_BLOCK`` (ValueError otherwise,
            from :func:`rotate_blocks`); returned in ``h``'s dtype.
    """
    return rotate_blocks(rotate_blocks(h).t()).t()

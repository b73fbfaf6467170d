"""GPTQ: data-aware rounding of a weight from the second moments of the layer's inputs.

    with tcgemm.calibrate(model, second_moments=True) as calib, torch.no_grad():
        model(sample)
    tcgemm.quantize_model(model, scheme=tcgemm.W4A8, calibration=calib, gptq=tcgemm.GPTQ())

:class:`GPTQ` holds the settings; :func:`tcgemm.weights.quantize_weight` and the layer's
``from_linear`` call :func:`gptq_integers` with the grid round-to-nearest would use, so a GPTQ
layer has the format (and runs the kernels) of any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import torch

__all__ = ["GPTQ", "HessianLike", "gptq_integers", "hessian_tensor", "output_error"]

# A layer's input second moments: sum x^T x [K, K], or the (sum, rows) pair of Calibration.hessians.
HessianLike = Union[torch.Tensor, tuple[torch.Tensor, int]]


@dataclass(frozen=True)
class GPTQ:
    """GPTQ (Frantar et al., 2022): quantizes a weight one input column at a time and spreads each
    column's rounding error over the columns not yet quantized, weighted by the inverse of the
    second moments ``H = sum x^T x`` of the layer's inputs, so that the layer's outputs on
    inputs like the calibration ones change least (``||X W^T - X W_q^T||``), not the weight.

    The scales are those of round-to-nearest (``quantize_weight``'s ``grid``, by default the
    scales of the least squared error of the rounded weight), from the float weight's groups
    before GPTQ runs: only the integers differ, so a GPTQ layer has the format (and runs the kernels) of any other.

    The defaults, ``GPTQ()`` = ``GPTQ(damp=0.1, act_order=True, block_size=128, rtn_fallback=True)``,
    are chosen to hold up when the calibration is small (fewer token rows than input features,
    so ``H`` is singular and GPTQ would otherwise move rounding error into input directions the
    calibration never showed). all-MiniLM-L6-v2 W4A8, mean embedding cosine (worst sentence) with
    the first 8 / 24 / 64 / all 671 sentences of the tests' GPTQ calibration: round-to-nearest
    0.959 (0.930); ``GPTQ()`` 0.971 (0.849) / 0.978 (0.957) / 0.982 (0.971) / 0.985 (0.976); the
    defaults before, ``damp=0.01, act_order=False``, 0.942 (0.797) / 0.954 (0.826) / 0.973
    (0.930) / 0.983 (0.974), below round-to-nearest up to 24 sentences. With a large
    calibration a smaller damp does slightly better (``GPTQ(damp=0.03)``: 0.986 with the 671).

    Fallback (``rtn_fallback=True``): after GPTQ, each output row n of the weight keeps the
    integers of round-to-nearest on the same grid, ``clamp(round_half_even(w / step), lo, hi)``,
    where they have the smaller output error on the calibration inputs,
    ``(w_n - wq_n) H (w_n - wq_n)^T`` with ``H`` the second moments as given (undamped; ties keep
    GPTQ's). Rows are independent in that error, so the layer's ``trace((W - W_q) H (W - W_q)^T)``
    is never above round-to-nearest's. It is deterministic (float64 on the weight's device) and
    changes only integers. It guards against rows that GPTQ spoils (error carried into weights
    that then clip at the grid's ends, with little damping or without ``act_order``); it cannot
    see directions the calibration lacks (there GPTQ looks better than it is), which is what
    the damping is for.

    Args:
        damp: added to the diagonal of ``H`` as ``damp * mean(diag(H))`` before it is inverted
            (the calibration rarely spans every input direction); larger is more stable and
            closer to round-to-nearest. Default 0.1.
        act_order: quantize the columns in decreasing order of ``diag(H)`` (the inputs with the
            largest second moments first, while there are the most columns left to absorb
            their error); the scales stay those of the weight's 1x128 groups. Default True.
        block_size: columns quantized together; the error of a block reaches the columns after
            it in one matrix product (the result does not depend on it up to rounding). Default 128.
        rtn_fallback: the per-row fallback to round-to-nearest above. Default True; False gives
            GPTQ's integers unchanged.

    Example:
        >>> with tcgemm.calibrate(model, second_moments=True) as calib, torch.no_grad():
        ...     model(sample)
        >>> tcgemm.quantize_model(model, scheme=tcgemm.W4A8, calibration=calib, gptq=tcgemm.GPTQ())
    """

    damp: float = 0.1
    act_order: bool = True
    block_size: int = 128
    rtn_fallback: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.damp, bool) or not isinstance(self.damp, (int, float)) or not (
                math.isfinite(self.damp) and self.damp >= 0):
            raise ValueError(f"tcgemm.GPTQ: argument 'damp' must be a finite number >= 0, got {self.damp!r}")
        if not isinstance(self.act_order, bool):
            raise TypeError(f"tcgemm.GPTQ: argument 'act_order' must be a bool, got {type(self.act_order).__name__}")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 1:
            raise ValueError(f"tcgemm.GPTQ: argument 'block_size' must be an int >= 1, got {self.block_size!r}")
        if not isinstance(self.rtn_fallback, bool):
            raise TypeError(
                f"tcgemm.GPTQ: argument 'rtn_fallback' must be a bool, got {type(self.rtn_fallback).__name__}")


def hessian_tensor(where: str, hessian: HessianLike, k: int) -> torch.Tensor:
    """``hessian`` (a [K, K] tensor, or the (sum, rows) pair of Calibration.hessians: their mean)
    as a [K, K] tensor, checked.

    Args:
        where: the caller's name, the prefix of the error messages.
        hessian: a float tensor [K, K], or a ``(sum x^T x, rows)`` pair (returned as ``sum / rows``).
        k: the layer's in_features K.

    Raises:
        TypeError: ``hessian`` is neither a tensor nor a pair whose first item is one, or is not
            floating point.
        ValueError: its shape is not [K, K].
    """
    if isinstance(hessian, (tuple, list)):
        if len(hessian) != 2 or not isinstance(hessian[0], torch.Tensor):
            raise TypeError(f"{where}: argument 'hessian' must be a tensor [K, K] or a (sum x^T x, rows) pair "
                            "of Calibration.hessians")
        total, rows = hessian
        hessian = total / max(int(rows), 1)
    if not isinstance(hessian, torch.Tensor):
        raise TypeError(f"{where}: argument 'hessian' must be a tensor [K, K] or a (sum x^T x, rows) pair, "
                        f"got {type(hessian).__name__}")
    if tuple(hessian.shape) != (k, k):
        raise ValueError(f"{where}: argument 'hessian' must have shape [K, K] = [{k}, {k}] (the second moments of "
                         f"the layer's input), got {list(hessian.shape)}")
    if not hessian.is_floating_point():
        raise TypeError(f"{where}: argument 'hessian' must be a float tensor, got {hessian.dtype}")
    return hessian


def gptq_integers(where: str, w: torch.Tensor, hessian: torch.Tensor, step: torch.Tensor, lo: int, hi: int,
          config: GPTQ) -> torch.Tensor:
    """The integers GPTQ gives the weight ``w`` [N, K] on the grid ``step`` [N, K] (one step per
    element, fixed beforehand) clamped to [lo, hi], with second moments ``hessian`` [K, K]; int8
    [N, K]. fp32 on ``w``'s device, the Hessian's inverse and its Cholesky factor in float64.

    Args:
        where: the caller's name, the prefix of the error messages.
        w: the float weight [N, K].
        hessian: the second moments of the layer's input [K, K] (:func:`hessian_tensor`); inputs
            whose diagonal entry is 0 never reached the layer and their weights quantize to 0.
        step: the grid's step per element [N, K] (steps <= 0 are taken as 1).
        lo: the smallest integer of the grid (e.g. -128, or -8 for 4 bits).
        hi: the largest integer of the grid.
        config: the :class:`GPTQ` settings (``damp``, ``act_order``, ``block_size``,
            ``rtn_fallback``: a row keeps round-to-nearest's integers where their output error on
            ``hessian`` is smaller).

    Raises:
        ValueError: ``w`` or ``hessian`` holds NaN or inf, or the damped Hessian is not positive
            definite (a larger ``damp`` or more calibration data helps).
    """
    n, k = w.shape
    device = w.device
    weight = w.detach().to(torch.float32).clone()
    if not bool(weight.isfinite().all()):
        raise ValueError(f"{where}: GPTQ needs a finite weight; w holds NaN or inf")
    h = hessian.detach().to(device=device, dtype=torch.float64).clone()
    if not bool(h.isfinite().all()):
        raise ValueError(f"{where}: argument 'hessian' holds NaN or inf (did the calibration inputs?)")
    step = torch.where(step > 0, step.float(), 1.0)  # a step that underflowed to 0: any grid holds those zeros
    grid = step  # in the weight's column order (step is permuted with act_order)
    # Inputs that never reached the layer: nothing to preserve; their weights quantize to 0.
    dead = h.diagonal() == 0
    idx = dead.nonzero().squeeze(1)
    h[idx, idx] = 1.0
    weight[:, dead] = 0.0
    perm = None
    if config.act_order:
        perm = torch.argsort(h.diagonal(), descending=True, stable=True)
        weight, step, h = weight[:, perm], step[:, perm], h[perm][:, perm]
    h.diagonal().add_(config.damp * h.diagonal().mean())
    chol, info = torch.linalg.cholesky_ex(h)
    if int(info) == 0:
        # U upper triangular with H^-1 = U^T U: row i of U, over U[i, i], carries column i's error
        # to the columns after it (the inverse Hessian of the columns left, by elimination).
        u, info = torch.linalg.cholesky_ex(torch.cholesky_inverse(chol), upper=True)
    if int(info) != 0:
        raise ValueError(f"{where}: the damped Hessian is not positive definite (GPTQ damp={config.damp}); "
                         "pass a larger GPTQ(damp=...) or more calibration data")
    u = u.to(torch.float32)
    # Column k of the weight is row k here: each step reads and updates contiguous rows.
    wt, st = weight.t().contiguous(), step.t().contiguous()
    qt = torch.empty_like(wt)
    for b0 in range(0, k, config.block_size):
        b1 = min(b0 + config.block_size, k)
        ub = u[b0:b1, b0:b1]
        err = torch.empty(b1 - b0, n, dtype=torch.float32, device=device)
        for i in range(b1 - b0):
            row, s = wt[b0 + i], st[b0 + i]
            qi = torch.round(row / s).clamp_(lo, hi)
            qt[b0 + i] = qi
            e = (row - qi * s) / ub[i, i]
            err[i] = e
            wt[b0 + i + 1:b1].addr_(ub[i, i + 1:], e, alpha=-1.0)
        wt[b1:].addmm_(u[b0:b1, b1:].t(), err, alpha=-1.0)  # the block's error, to the columns after it
    q = qt.t()
    if perm is not None:
        q = q[:, torch.argsort(perm)]
    if config.rtn_fallback:
        del wt, qt, u, chol, h
        w = w.detach().to(torch.float32)
        rtn = torch.round(w / grid).clamp_(lo, hi)
        h = hessian.detach().to(device=device, dtype=torch.float64)
        worse = output_error(w, rtn, grid, h) < output_error(w, q, grid, h)
        q = torch.where(worse[:, None], rtn, q)
    return q.to(torch.int8).contiguous()


def output_error(w: torch.Tensor, q: torch.Tensor, step: torch.Tensor, hessian: torch.Tensor) -> torch.Tensor:
    """Per row n, ``e_n H e_n^T`` with ``e = w - q * step`` (the squared output error of row n on
    inputs of second moments ``H``), float64 [N]; a few rows at a time (bounded memory).

    Args:
        w: the float weight [N, K].
        q: its integers [N, K] (any integer or float dtype).
        step: the grid, one step per element [N, K].
        hessian: the second moments ``sum x^T x`` [K, K] (float64 keeps the sum exact enough).
    """
    n, k = w.shape
    out = torch.empty(n, dtype=torch.float64, device=w.device)
    rows = max(1, (1 << 22) // max(k, 1))
    for r0 in range(0, n, rows):
        r1 = min(r0 + rows, n)
        e = w[r0:r1].double() - q[r0:r1].double() * step[r0:r1].double()
        out[r0:r1] = ((e @ hessian) * e).sum(dim=1)
    return out



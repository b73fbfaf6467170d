"""Typed wrappers over torch.ops.tcgemm, each with its fake (meta) implementation beside it."""

from __future__ import annotations

from typing import Optional

import torch

try:
    from . import _C  # noqa: F401  (loading the library registers torch.ops.tcgemm)
except ImportError as exc:  # pragma: no cover - only without a build
    raise ImportError(
        "tcgemm's compiled extension (tcgemm._C) is missing or was built for another torch: "
        "reinstall with `pip install --no-build-isolation -e .`"
    ) from exc

BACKENDS = ("auto", "cpu", "wmma", "wmma_simple", "sm80", "sm90", "skinny")
_OP = "tcgemm.gemm"


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    c: Optional[torch.Tensor] = None,
    alpha: int = 1,
    beta: int = 0,
    *,
    out: Optional[torch.Tensor] = None,
    backend: str = "auto",
) -> torch.Tensor:
    """D = alpha * (A @ B) + beta * C, exact in int32 arithmetic that wraps modulo 2**32.

    Args:
        a: int8 or uint8 [M, K]; any strides (row- or column-major are read in place).
        b: int8 or uint8 [K, N]; the dtypes of ``a`` and ``b`` may differ.
        c: int32 [M, N], any strides (an ``expand``-ed row or column broadcasts); read only when
            ``beta != 0``.
        alpha, beta: int32 scalars.
        out: optional int32 [M, N] to write into (may be ``c`` itself); returned.
        backend: "auto", or force one: "cpu" (CPU tensors), "wmma", "wmma_simple", "sm80",
            "sm90" (Hopper, compute capability 9.0), "skinny" (the few-rows kernel that "sm80" and
            "sm90" take for M <= 32 against a wide B; compute capability >= 8.0).

    Returns:
        int32 [M, N] on the device of ``a``.

    Example:
        >>> d = tcgemm.gemm(a, b, c, alpha=2, beta=-1)
    """
    if out is None:
        return torch.ops.tcgemm.gemm.default(a, b, c, alpha, beta, backend)
    torch.ops.tcgemm.gemm_out.default(a, b, c, alpha, beta, backend, out=out)
    return out


def int8_gemm(
    a: torch.Tensor, b: torch.Tensor, *, out: Optional[torch.Tensor] = None, backend: str = "auto"
) -> torch.Tensor:
    """A @ B for int8/uint8 ``a`` [M, K] and ``b`` [K, N], returned as exact int32 [M, N].

    Accumulation wraps modulo 2**32; with int8 inputs K <= 131071 can never overflow
    (uint8 x uint8: K <= 33025). See :func:`gemm` for layouts, ``out`` and ``backend``.

    Example:
        >>> c = tcgemm.int8_gemm(x_int8, w_int8.t())   # w: nn.Linear-style [N, K]
    """
    return gemm(a, b, out=out, backend=backend)


def available_backends(device: torch.device | str | int | None = None) -> list[str]:
    """Backends that run on ``device``, best first: ["cpu"] for the CPU, else the GPU kernels
    this GPU supports, best first, then "skinny" (e.g. ["sm90", "sm80", "wmma", "wmma_simple",
    "skinny"] on an H100/H200, ["sm80", "wmma", "wmma_simple", "skinny"] on Ampere)."""
    device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if device.type == "cpu":
        return ["cpu"]
    if device.type != "cuda":
        raise ValueError(f"tcgemm.available_backends: expected a cpu or cuda device, got {device}")
    index = torch.cuda.current_device() if device.index is None else device.index
    names = torch.ops.tcgemm.available_backends(index)
    return names.split(",") if names else []


def _check_fake_args(a, b, c, alpha, beta, out=None) -> None:
    """The binding layer's checks, for fake tensors and meta kernels (same messages)."""
    for name, t, shape in (("a", a, "[M, K]"), ("b", b, "[K, N]")):
        torch._check(t.dim() == 2, lambda: f"{_OP}: argument '{name}' must be a 2-D tensor {shape}, got a {t.dim()}-D tensor")
        torch._check(
            t.dtype in (torch.int8, torch.uint8),
            lambda: f"{_OP}: argument '{name}' must have dtype torch.int8 or torch.uint8, got {t.dtype}",
        )
    torch._check(
        a.shape[1] == b.shape[0],
        lambda: f"{_OP}: K mismatch: 'a' is [M, K] = {list(a.shape)} but 'b' is [K, N] = {list(b.shape)}",
    )
    for name, value in (("alpha", alpha), ("beta", beta)):
        torch._check(-(2**31) <= value < 2**31, lambda: f"{_OP}: argument '{name}' must fit in int32, got {value}")
    torch._check(beta == 0 or c is not None, lambda: f"{_OP}: argument 'beta' is {beta} but no 'c' was given")
    m, n = a.shape[0], b.shape[1]
    for name, t in (("b", b), ("c", c), ("out", out)):
        if t is None:
            continue
        torch._check(
            t.device == a.device,
            lambda: f"{_OP}: argument '{name}' must be on the same device as 'a' ({a.device}), got {t.device}",
        )
        if name != "b":
            torch._check(t.dtype == torch.int32, lambda: f"{_OP}: argument '{name}' must have dtype torch.int32, got {t.dtype}")
            torch._check(
                t.dim() == 2 and t.shape[0] == m and t.shape[1] == n,
                lambda: f"{_OP}: argument '{name}' must have shape [M, N] = [{m}, {n}], got {list(t.shape)}",
            )


@torch.library.register_fake("tcgemm::gemm")
def _gemm_fake(a, b, c=None, alpha=1, beta=0, backend="auto"):
    _check_fake_args(a, b, c, alpha, beta)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.int32)


@torch.library.register_fake("tcgemm::gemm_out")
def _gemm_out_fake(a, b, c, alpha, beta, backend, *, out):
    _check_fake_args(a, b, c, alpha, beta, out)


_SCALED_OP = "tcgemm.scaled_gemm"


def scaled_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Dequantized int8 GEMM with the scales, bias and conversion fused into the kernel.

    ``out[m, n] = sum_kb acc_kb[m, n] * sa(m, kb) * sb(n, kb) + bias[n]``, rounded once to
    ``out_dtype``, where ``acc_kb`` is the exact int32 dot product over the 128-wide K block ``kb``
    and the scales are applied in fp32. Without per-block scales this is
    ``acc[m, n] * sa(m) * sb(n) + bias[n]`` with the whole exact int32 ``acc``.

    Args:
        a: int8 [M, K] (quantized activations); any strides.
        b: int8 [K, N]; for an ``nn.Linear``-style weight ``w`` [N, K] pass ``w.t()``.
        scale_a: fp32; the shape picks the granularity: ``[]``/``[1]`` per-tensor, ``[M, 1]``
            per-token, ``[M, ceil(K/128)]`` per-block (1x128 groups along K).
        scale_b: fp32; ``[]``/``[1]`` per-tensor, ``[N]`` or ``[1, N]`` per-channel,
            ``[ceil(N/128), ceil(K/128)]`` per-block (128x128), or ``[N, ceil(K/128)]``
            (ambiguous shapes resolve in that order).
        bias: optional [N], any float dtype (applied in fp32).
        out_dtype: torch.bfloat16 (default), torch.float16 or torch.float32.
        backend: "auto", "cpu", "sm80", "sm90" or "skinny".

    Without per-block scales K must be <= 131071 (the int32 accumulator cannot overflow).

    Example:
        >>> qx, sx = tcgemm.quantize(x)                       # per-token
        >>> y = tcgemm.scaled_gemm(qx, qw.t(), sx, sw, bias)  # qw int8 [N, K], sw fp32 [N]
    """
    return torch.ops.tcgemm.scaled_gemm.default(a, b, scale_a, scale_b, bias, out_dtype, backend)


def _scaled_shapes_ok(scale_a, scale_b, m, n, k) -> tuple[bool, bool]:
    kb = max(1, -(-k // 128))
    nb = -(-n // 128)
    sa, sb = list(scale_a.shape), list(scale_b.shape)
    a_ok = (scale_a.numel() == 1 and scale_a.dim() <= 2) or sa in ([m, 1], [m, kb])
    b_ok = (scale_b.numel() == 1 and scale_b.dim() <= 2) or sb in ([n], [1, n], [nb, kb], [n, kb])
    return a_ok, b_ok


@torch.library.register_fake("tcgemm::scaled_gemm")
def _scaled_gemm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None, backend="auto"):
    for name, t, shape in (("a", a, "[M, K]"), ("b", b, "[K, N]")):
        torch._check(t.dim() == 2, lambda: f"{_SCALED_OP}: argument '{name}' must be a 2-D tensor {shape}, got a {t.dim()}-D tensor")
        torch._check(t.dtype == torch.int8, lambda: f"{_SCALED_OP}: argument '{name}' must have dtype torch.int8, got {t.dtype}")
    torch._check(
        a.shape[1] == b.shape[0],
        lambda: f"{_SCALED_OP}: K mismatch: 'a' is [M, K] = {list(a.shape)} but 'b' is [K, N] = {list(b.shape)}",
    )
    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    torch._check(
        out_dtype in (torch.bfloat16, torch.float16, torch.float32),
        lambda: f"{_SCALED_OP}: argument 'out_dtype' must be torch.bfloat16, torch.float16 or torch.float32, got {out_dtype}",
    )
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        torch._check(s.dtype == torch.float32, lambda: f"{_SCALED_OP}: argument '{name}' must have dtype torch.float32, got {s.dtype}")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    a_ok, b_ok = _scaled_shapes_ok(scale_a, scale_b, m, n, k)
    torch._check(a_ok, lambda: f"{_SCALED_OP}: argument 'scale_a' has an unsupported shape {list(scale_a.shape)}")
    torch._check(b_ok, lambda: f"{_SCALED_OP}: argument 'scale_b' has an unsupported shape {list(scale_b.shape)}")
    if bias is not None:
        torch._check(
            bias.dim() == 1 and bias.shape[0] == n,
            lambda: f"{_SCALED_OP}: argument 'bias' must have shape [N] = [{n}], got {list(bias.shape)}",
        )
    return a.new_empty((m, n), dtype=out_dtype)

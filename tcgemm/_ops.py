"""Typed wrappers over torch.ops.tcgemm, each with its fake (meta) implementation beside it."""

from __future__ import annotations

from typing import Optional

import torch

from ._checks import check_args, require_int32, require_str, require_tensor
from ._library import BACKEND_EPILOGUES, BACKENDS, typed_error  # noqa: F401  (tcgemm.BACKENDS)
from ._scales import SCALE_BLOCK
from .scheme import as_scheme

_GEMM = "tcgemm.gemm"
_SCALED = "tcgemm.scaled_gemm"
_QUANT_LINEAR = "tcgemm.quant_linear"
_UNPACK_INT4 = "tcgemm.unpack_int4"
_INT4_GEMM = "tcgemm.int4_gemm"
_INT32_MIN, _INT32_END = -(2**31), 2**31
Tensor = torch.Tensor
# The ops (registered by tcgemm._C, which _library loads), looked up once: each lookup in the
# chain torch.ops.tcgemm.<op>.default is host time on every call.
_OPS = {name: getattr(torch.ops.tcgemm, name).default
        for name in ("gemm", "gemm_out", "scaled_gemm", "quant_linear", "unpack_int4", "gemm_int4")}


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
        alpha: int32 scalar multiplying ``A @ B`` (a Python int; TypeError for another type,
            ValueError outside int32).
        beta: int32 scalar multiplying ``c``, like ``alpha``; nonzero needs ``c`` (ValueError).
        out: optional int32 [M, N] to write into (may be ``c`` itself); returned.
        backend: "auto", or force one: "cpu" (CPU tensors), "wmma", "wmma_simple", "sm80",
            "sm90" (Hopper, compute capability 9.0), "skinny" (the few-rows kernel that "sm80" and
            "sm90" hand M <= 8 rows, or <= 16 against a narrower B, when B is wide enough to fill
            the GPU and K >= 512; forced, it takes any M; compute capability >= 8.0). "sm90" hands
            one row against a K-major int8 ``b`` of 20 MiB or more to a GEMV (dp4a, one warp per
            column of ``b``).
            :func:`backends_for` lists the ones a device runs for an op.

    Returns:
        int32 [M, N] on the device of ``a``.

    Example:
        >>> d = tcgemm.gemm(a, b, c, alpha=2, beta=-1)
    """
    # What the checks below pass, in one condition for the common call (each check is host time).
    if not (type(a) is Tensor and type(b) is Tensor and (c is None or type(c) is Tensor)
            and type(alpha) is int and type(beta) is int and _INT32_MIN <= alpha < _INT32_END
            and _INT32_MIN <= beta < _INT32_END and type(backend) is str and (out is None or type(out) is Tensor)):
        for name, value in (("a", a), ("b", b)):
            require_tensor(_GEMM, name, value)
        require_tensor(_GEMM, "c", c, optional=True)
        require_int32(_GEMM, "alpha", alpha)
        require_int32(_GEMM, "beta", beta)
        require_tensor(_GEMM, "out", out, optional=True)
        require_str(_GEMM, "backend", backend)
    try:
        if out is None:
            return _OPS["gemm"](a, b, c, alpha, beta, backend)
        _OPS["gemm_out"](a, b, c, alpha, beta, backend, out=out)
    except RuntimeError as exc:
        raise typed_error(exc) from None
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
    "skinny"] on an H100/H200, ["sm80", "wmma", "wmma_simple", "skinny"] on Ampere).

    Without ``device``: the current CUDA device, or the CPU on a machine without one."""
    op = "tcgemm.available_backends"
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{op}: argument 'device' must name a cpu or cuda device, got {device!r}") from exc
    if device.type == "cpu":
        return ["cpu"]
    if device.type != "cuda":
        raise ValueError(f"{op}: argument 'device' must be a cpu or cuda device, got {device}")
    if not torch.cuda.is_available():
        return []  # no CUDA device visible: no GPU backend runs here
    index = device.index if device.index is not None else torch.cuda.current_device()
    # The library checks the index (a ValueError naming the visible devices, also without a GPU).
    try:
        names = torch.ops.tcgemm.available_backends(index)
    except RuntimeError as exc:
        raise typed_error(exc) from None
    return names.split(",") if names else []


# The epilogue family each op's kernels run: the exact int32 GEMM, or the scaled one.
_OP_EPILOGUES = {"gemm": "int32", "int8_gemm": "int32", "int4_gemm": "int32", "scaled_gemm": "scaled",
                 "quant_linear": "scaled"}


def supports(backend: str, op: str, scheme=None) -> bool:
    """Whether ``backend``'s kernels run ``op`` ("gemm", "int8_gemm", "int4_gemm", "scaled_gemm" or
    "quant_linear") with the scales of ``scheme`` (a :class:`tcgemm.QuantScheme` or a preset name
    such as ``"w8a8-block"``; per-block scales need the promoting kernels), whatever the device.
    Read from the library's dispatch
    table, so a new backend needs no edit here.

    Example:
        >>> tcgemm.supports("wmma", "scaled_gemm")
        False
    """
    if op not in _OP_EPILOGUES:
        raise ValueError(f"tcgemm.supports: argument 'op' must be one of {', '.join(map(repr, _OP_EPILOGUES))}, "
                         f"got {op!r}")
    if backend not in BACKEND_EPILOGUES:
        raise ValueError(f"tcgemm.supports: argument 'backend' must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if scheme is not None:
        scheme = as_scheme("tcgemm.supports", scheme)
    if scheme is not None and scheme.weights.group_size != SCALE_BLOCK:  # promoted per 32 or 64 inputs
        return op == "quant_linear" and backend in ("skinny", "cpu")
    families = BACKEND_EPILOGUES[backend]
    needed = _OP_EPILOGUES[op]
    if needed == "scaled" and scheme is not None and scheme.per_block:
        needed = "per_block"
    return needed in families


def backends_for(op: str, scheme=None, device: torch.device | str | int | None = None) -> list[str]:
    """The backends of :func:`available_backends` (``device``'s, best first) that run ``op`` with
    ``scheme`` (a :class:`tcgemm.QuantScheme` or a preset name; see :func:`supports`): e.g.
    ``backends_for("scaled_gemm")`` is ["sm90", "sm80",
    "skinny"] on an H100/H200, ``backends_for("gemm", device="cpu")`` is ["cpu"].

    Example:
        >>> for backend in tcgemm.backends_for("quant_linear", tcgemm.W8A8_BLOCK):
        ...     y = tcgemm.quant_linear(x, qw, sw, activation="block", backend=backend)
    """
    return [b for b in available_backends(device) if supports(b, op, scheme)]


@torch.library.register_fake("tcgemm::gemm")
def _gemm_fake(a, b, c=None, alpha=1, beta=0, backend="auto"):
    check_args("gemm", a=a, b=b, c=c, alpha=alpha, beta=beta, backend=backend)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.int32)


@torch.library.register_fake("tcgemm::gemm_out")
def _gemm_out_fake(a, b, c, alpha, beta, backend, *, out):
    check_args("gemm_out", a=a, b=b, c=c, alpha=alpha, beta=beta, backend=backend, out=out)


def scaled_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    out_dtype: torch.dtype = torch.bfloat16,
    *,
    backend: str = "auto",
    zero_point_a: Optional[torch.Tensor] = None,
    colsum_b: Optional[torch.Tensor] = None,
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
        zero_point_a: optional int32 zero points of ``a`` (asymmetric activations,
            ``x ~ scale_a * (a - zero_point_a)``): ``[]``/``[1]`` per tensor or ``[M, 1]`` per
            token. The kernel then computes ``(acc - zero_point_a[m] * colsum_b[n]) * sa * sb +
            bias``, the int32 correction exact. Needs scales that do not change along K and
            K <= 65793 (the corrected sum fits int32).
        colsum_b: optional int32 ``[N]`` column sums of ``b`` (``b.sum(0, dtype=torch.int32)``),
            with ``zero_point_a`` only; computed when omitted (a layer keeps them precomputed).

    Without per-block scales K must be <= 131071 (the int32 accumulator cannot overflow).

    Example:
        >>> qx, sx = tcgemm.quantize(x)                       # per-token
        >>> y = tcgemm.scaled_gemm(qx, qw.t(), sx, sw, bias)  # qw int8 [N, K], sw fp32 [N]
    """
    if not (type(a) is Tensor and type(b) is Tensor and type(scale_a) is Tensor and type(scale_b) is Tensor
            and (bias is None or type(bias) is Tensor) and zero_point_a is None and colsum_b is None
            and type(out_dtype) is torch.dtype and type(backend) is str):  # else the checks one by one
        for name, value in (("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
            require_tensor(_SCALED, name, value)
        for name, value in (("bias", bias), ("zero_point_a", zero_point_a), ("colsum_b", colsum_b)):
            require_tensor(_SCALED, name, value, optional=True)
        if not isinstance(out_dtype, torch.dtype):
            raise TypeError(
                f"{_SCALED}: argument 'out_dtype' must be a torch.dtype (torch.bfloat16, torch.float16 or "
                f"torch.float32), got {type(out_dtype).__name__} {out_dtype!r}"
            )
        require_str(_SCALED, "backend", backend)
    try:
        return _OPS["scaled_gemm"](
            a, b, scale_a, scale_b, bias, out_dtype, backend, zero_point_a, colsum_b
        )
    except RuntimeError as exc:
        raise typed_error(exc) from None


@torch.library.register_fake("tcgemm::scaled_gemm")
def _scaled_gemm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None, backend="auto", zero_point_a=None,
                      colsum_b=None):
    check_args(
        "scaled_gemm", a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=out_dtype, backend=backend,
        zero_point_a=zero_point_a, colsum_b=colsum_b,
    )
    return a.new_empty((a.shape[0], b.shape[1]), dtype=torch.bfloat16 if out_dtype is None else out_dtype)


def quant_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    activation: str = "token",
    *,
    input_scale: Optional[torch.Tensor] = None,
    smooth: Optional[torch.Tensor] = None,
    backend: str = "auto",
    asymmetric: bool = False,
    input_zero_point: Optional[torch.Tensor] = None,
    weight_colsum: Optional[torch.Tensor] = None,
    weight_group_scale: Optional[torch.Tensor] = None,
    rotate: bool = False,
    weight_zero_point: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The W8A8 (or W4A8) linear layer as one op: ``x @ (weight * weight_scale).T + bias`` with ``x``
    quantized on the fly, what :class:`tcgemm.QuantLinear` computes.

    Bit for bit ``tcgemm.scaled_gemm(*tcgemm.quantize(x2d, g, scale=s, smooth=smooth),
    weight.t(), weight_scale, bias, out_dtype=x.dtype)`` with ``g`` the granularity of the
    activations (:class:`tcgemm.ActivationArgs`: "token" for ``activation="token"``, "group" for
    "block", "tensor" with ``s = input_scale`` for "static"), behind one dispatch: on a GPU of compute
    capability 9.0 the few-rows GEMM starts streaming the weight while the activations are still
    being quantized (programmatic dependent launch).

    Args:
        x: [..., K] bf16, fp16 or fp32; any strides.
        weight: int8 [N, K] (``nn.Linear`` layout), or 4-bit weights packed two per byte along K:
            uint8 [N, K/2] (:func:`tcgemm.pack_int4`; K even), whose int8 weight is
            :func:`unpack_int4` ``(weight, weight_group_scale, weight_zero_point)``.
        weight_scale: fp32 ``[N]`` per channel, ``[ceil(N/128), ceil(K/128)]`` per 128x128 block,
            or ``[N, ceil(K/128)]`` per channel and 1x128 block (told apart by rank); ``[N, 1]``
            (what :func:`tcgemm.quantize` returns for a weight's rows) is per channel too. With a
            4-bit ``weight`` also ``[N, ceil(K/64)]`` or ``[N, ceil(K/32)]``, per channel and group
            of 64 or 32 inputs (told apart by width; each group's exact int32 sum promoted with
            its scale; on a GPU the few-rows kernel runs them at any number of rows: see
            :func:`tcgemm.int4.grouped_linear_by_phases` for many rows), in fp32, bf16 or fp16
            (read in place, converted to fp32 exactly: the result of the fp32 table of the same values).
        bias: optional [N], any float dtype (applied in fp32).
        activation: "token" (one scale per row of x), "block" (per row and 128-wide K block), or
            "static" (the calibrated per-tensor ``input_scale``: no amax pass); a
            :class:`tcgemm.QuantScheme`'s ``activation`` is this word for its activations.
        input_scale: fp32, one element; required with ``activation="static"``, else None.
        smooth: optional fp32 ``[K]`` SmoothQuant multipliers applied to x in the quantize pass
            (the weight carries their reciprocals).
        backend: as for :func:`scaled_gemm`.
        asymmetric: quantize x with a zero point (``tcgemm.quantize(..., symmetric=False)``),
            dynamically per token (``activation="token"``) or with the calibrated static
            ``input_scale`` and ``input_zero_point`` (``activation="static"``); the GEMM's epilogue
            subtracts ``zero_point * weight_colsum``. Needs a per-channel ``weight_scale`` and
            K <= 65793.
        input_zero_point: int32, one element; with ``activation="static"`` and ``asymmetric``.
        weight_colsum: optional int32 ``[N]``, ``weight.sum(1, dtype=torch.int32)``, with
            ``asymmetric`` only; computed per call when omitted (:class:`tcgemm.QuantLinear`
            keeps it).
        weight_group_scale: two-level scales of a 4-bit ``weight``: int8 ``[N, ceil(K/128)]``
            in [1, 16], one per 1x128 group, with a per-channel ``weight_scale`` ``[N]``: the
            layer computes with the int8 weight ``q * weight_group_scale`` and accumulates over
            all of K in int32 (values outside [1, 16] raise ValueError for CPU tensors; CUDA
            tensors are not read on the host, and such a value gives an unspecified result).
        rotate: quantize ``x R`` instead of ``x`` (:mod:`tcgemm.rotation`: each block of 128
            input features times the orthonormal Hadamard matrix, in fp32 inside the quantize
            kernel), for a weight quantized as ``W R``: bit for bit ``tcgemm.quantize(x2d, g,
            rotate=True)`` then the scaled GEMM. Dynamic symmetric activations ("token" or
            "block") without ``smooth``, K a multiple of 128.
        weight_zero_point: zero points of an asymmetric 4-bit ``weight``: int8 ``[N, ceil(K/128)]``
            in [-8, 7], one per 1x128 group: the layer computes with the int8 weight ``q -
            weight_zero_point`` (in [-15, 15]) and fp32 scales (per channel or per group; not with
            ``weight_group_scale``). On a GPU the few-rows kernel reads them in place (up to 32 rows,
            fp32 scales per group); elsewhere the weight is unpacked into int8 ``q - z`` first. Values
            outside [-8, 7] raise ValueError for CPU tensors; CUDA tensors are not read on the host.

    Returns:
        [..., N] of ``x.dtype``.

    Example:
        >>> qw, sw = tcgemm.nn.quantize_weight(linear.weight, "channel")
        >>> y = tcgemm.quant_linear(x, qw, sw, linear.bias)
    """
    if not (type(x) is Tensor and type(weight) is Tensor and type(weight_scale) is Tensor
            and (bias is None or type(bias) is Tensor) and input_scale is None and smooth is None
            and asymmetric is False and input_zero_point is None and weight_colsum is None
            and weight_group_scale is None and rotate is False and weight_zero_point is None
            and type(activation) is str
            and type(backend) is str):
        for name, value in (("x", x), ("weight", weight), ("weight_scale", weight_scale)):
            require_tensor(_QUANT_LINEAR, name, value)
        for name, value in (("bias", bias), ("input_scale", input_scale), ("smooth", smooth),
                            ("input_zero_point", input_zero_point), ("weight_colsum", weight_colsum),
                            ("weight_group_scale", weight_group_scale), ("weight_zero_point", weight_zero_point)):
            require_tensor(_QUANT_LINEAR, name, value, optional=True)
        require_str(_QUANT_LINEAR, "activation", activation)
        require_str(_QUANT_LINEAR, "backend", backend)
        for name, value in (("asymmetric", asymmetric), ("rotate", rotate)):
            if not isinstance(value, bool):
                raise TypeError(f"{_QUANT_LINEAR}: argument '{name}' must be a bool, got {type(value).__name__}")
    try:
        return _OPS["quant_linear"](
            x, weight, weight_scale, bias, activation, input_scale, smooth, backend, asymmetric, input_zero_point,
            weight_colsum, weight_group_scale, rotate, weight_zero_point,
        )
    except RuntimeError as exc:
        raise typed_error(exc) from None


@torch.library.register_fake("tcgemm::quant_linear")
def _quant_linear_fake(x, weight, weight_scale, bias=None, activation="token", input_scale=None, smooth=None,
                       backend="auto", asymmetric=False, input_zero_point=None, weight_colsum=None,
                       weight_group_scale=None, rotate=False, weight_zero_point=None):
    check_args(
        "quant_linear", x=x, weight=weight, weight_scale=weight_scale, bias=bias, activation=activation,
        input_scale=input_scale, smooth=smooth, backend=backend, asymmetric=asymmetric,
        input_zero_point=input_zero_point, weight_colsum=weight_colsum, weight_group_scale=weight_group_scale,
        rotate=rotate, weight_zero_point=weight_zero_point,
    )
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def unpack_int4(packed: torch.Tensor, group_scale: Optional[torch.Tensor] = None,
                zero_point: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The int8 weight of a packed 4-bit one: ``q[n, k]`` (times ``group_scale[n, k // 128]``, or
    less ``zero_point[n, k // 128]``).

    Packing (:func:`tcgemm.pack_int4`): byte ``j`` of row ``n`` holds ``q[n, 2j]`` in its low
    nibble and ``q[n, 2j + 1]`` in its high nibble, two's complement values in [-8, 7].

    Args:
        packed: uint8 [N, K/2], contiguous along K, on the CPU or a CUDA device.
        group_scale: optional int8 ``[N, ceil(K/128)]`` two-level group scales in [1, 16].
            Values outside [1, 16] raise ValueError for CPU tensors. CUDA tensors are not read on
            the host (that would synchronise): there the result of such a value is unspecified
            (it differs between kernels) but memory-safe; :class:`tcgemm.QuantLinear` refuses
            such tables when they are assigned or loaded.
        zero_point: optional int8 ``[N, ceil(K/128)]`` zero points of asymmetric 4-bit weights,
            in [-8, 7] (checked as ``group_scale`` is), not with ``group_scale``.

    Returns:
        int8 [N, K] on ``packed``'s device.

    Example:
        >>> w8 = tcgemm.unpack_int4(packed, group_scale)   # what the int32 GEMM computes with
    """
    require_tensor(_UNPACK_INT4, "packed", packed)
    require_tensor(_UNPACK_INT4, "group_scale", group_scale, optional=True)
    require_tensor(_UNPACK_INT4, "zero_point", zero_point, optional=True)
    try:
        return _OPS["unpack_int4"](packed, group_scale, zero_point)
    except RuntimeError as exc:
        raise typed_error(exc) from None


@torch.library.register_fake("tcgemm::unpack_int4")
def _unpack_int4_fake(packed, group_scale=None, zero_point=None):
    check_args("unpack_int4", packed=packed, group_scale=group_scale, zero_point=zero_point)
    return packed.new_empty((packed.shape[0], 2 * packed.shape[1]), dtype=torch.int8)


def int4_gemm(a: torch.Tensor, b: torch.Tensor, group_scale: Optional[torch.Tensor] = None, *,
              backend: str = "auto") -> torch.Tensor:
    """``a @ unpack_int4(b, group_scale).T`` as exact int32 (wrapping modulo 2**32): an int8
    activation against a packed 4-bit weight.

    Every backend gives the int32 result of :func:`int8_gemm` on the unpacked weight, bit for
    bit. The few-rows (skinny) kernel streams the packed bytes and unpacks them in registers;
    on Hopper the tiled sm90 kernel unpacks them in shared memory at up to 512 rows where N is
    wide enough to fill the GPU; the other shapes and backends compute with the unpacked int8
    weight.

    Args:
        a: int8 [M, K]; any strides.
        b: packed 4-bit weight, uint8 [N, K/2] (``nn.Linear`` layout, two values per byte along K).
        group_scale: optional int8 ``[N, ceil(K/128)]`` in [1, 16]. Values outside [1, 16] raise
            ValueError for CPU tensors. CUDA tensors are not read on the host (that would
            synchronise): there the result of such a value is unspecified (it differs between
            kernels) but memory-safe; :class:`tcgemm.QuantLinear` refuses
            such tables when they are assigned or loaded.
        backend: as for :func:`gemm`.

    Returns:
        int32 [M, N] on ``a``'s device.

    Example:
        >>> acc = tcgemm.int4_gemm(qx, packed, group_scale)   # == int8_gemm(qx, unpack_int4(packed, group_scale).t())
    """
    require_tensor(_INT4_GEMM, "a", a)
    require_tensor(_INT4_GEMM, "b", b)
    require_tensor(_INT4_GEMM, "group_scale", group_scale, optional=True)
    require_str(_INT4_GEMM, "backend", backend)
    try:
        return _OPS["gemm_int4"](a, b, group_scale, backend)
    except RuntimeError as exc:
        raise typed_error(exc) from None


@torch.library.register_fake("tcgemm::gemm_int4")
def _gemm_int4_fake(a, b, group_scale=None, backend="auto"):
    check_args("gemm_int4", a=a, b=b, group_scale=group_scale, backend=backend)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.int32)

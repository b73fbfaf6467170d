"""Decode-sized layers: QuantLinear against bf16 nn.Linear at a few rows, graphs and eager.

    python3 -m benchmarks.bench_decode [--quick] [--markdown docs/performance.md]

Each layer shape is timed as a decode step runs it: many different weights one after the other
(copies rotated so that the bytes of the smallest format, 4-bit, exceed 3x the L2, as the layers
of a model do), with the input rows fixed. "graph": the calls are captured in one CUDA graph and
replayed, the time per call is the replay's device time over the calls; "eager": the same calls
from Python, timed with events around the whole loop, so that host time counts where it exceeds
the kernels'. Methods take turns in rounds (interleaved, the order rotated each round), the median
over rounds is reported. Methods: bf16 ``F.linear``; ``QuantLinear`` (weight per channel,
activations per token: the one op ``tcgemm.quant_linear``); the same layer as two ops
(``tcgemm.quantize`` then ``tcgemm.scaled_gemm``, the path before the one op);
``QuantLinear(weight="block", activation="block")``; ``QuantLinear(scheme="w4a8")`` (4-bit
weights with an fp32 scale per channel and int8 scales per 128 inputs), the same with rotated inputs
(``rotate=True``: x rotated per 128 features inside its quantization), ``scheme="w4a8-group"``
(4-bit weights with an fp32 scale per 128 inputs, as most 4-bit checkpoints hold them),
``scheme="w4a8-group-asymmetric"`` (the same with a zero point per 128 inputs, as AWQ checkpoints
hold them), ``scheme="w4a8-group32"`` and ``"w4a8-group64"`` (symmetric, an fp32 scale per 32 or 64
inputs, as many GPTQ checkpoints hold them; by phases of groups of 128 above 128 rows), the same
with bf16 scales, as checkpoints hold them (``w4a8_group32_bf16``, ``w4a8_group64_bf16``:
``from_linear(..., scale_dtype=torch.bfloat16)``, the weight rounded against the bf16 scales); and
its peer, torch's int4 weight-only kernel (``torch.ops.aten._weight_int4pack_mm``, tinygemm) on
bf16 activations with weights packed as torchao's ``Int4WeightOnlyConfig`` packs them; and
gemlite's Triton kernels
(``gemlite_a8w8``: ``A8W8_int8_dynamic``, int8 weights per channel and int8 activations per token,
the int8 layer's peer; ``gemlite_a16w4``: ``A16Wn`` with 4-bit weights in asymmetric groups of 128
on bf16 activations), where gemlite is importable. Each method's output on the first
copy is compared with bf16's, so that no figure is of a layer computing nothing. A method that
cannot be built or run (torch's int4 op missing, say) is reported with its error. The weight
stream rate is a method's weight and scale bytes over the per-call time. Host time per call is
``timing.host_us`` on a small layer. Each layer's weights are built once and timed at every row
count. ``--plot`` draws the speed-up over bf16 against rows for 8B gate+up and 8B down (matplotlib).
A ``--decode-only`` run with 4-bit methods writes the "bench_decode rows" section of ``--markdown``
(the 4-bit table), and ``--readme README.md`` the README's table of W4A8 / W8A8 speed-ups over bf16
(its "bench_decode readme" section).
gemlite tunes each new shape on first use (seconds each): ``--gemlite-config tuned.json`` reads its
tuned configs from the file before the run and adds the run's to it after, so that the shapes of a
sweep can be tuned over several runs and timed in one.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from benchmarks import report, timing

# (name, K, N): the projections of the decode layers of Llama-3 8B and 70B (gate and up fused).
LAYERS = [
    ("8B qkv", 4096, 6144),
    ("8B o", 4096, 4096),
    ("8B gate+up", 4096, 28672),
    ("8B down", 14336, 4096),
    ("70B qkv", 8192, 10240),
    ("70B o", 8192, 8192),
    ("70B down", 28672, 8192),
]
# Run only when named in --layers: 8B projections as Hugging Face's Llama runs them, each of q, k,
# v, gate and up its own Linear (q is "8B o"'s shape, down "8B down"'s).
SPLIT_LAYERS = [
    ("8B kv", 4096, 1024),
    ("8B up", 4096, 14336),
]
ROWS = (1, 4, 16)
PREFILL = [("8B up", 4096, 14336), ("8B down", 14336, 4096)]
# Static (calibrated per-tensor) against dynamic per-token activation scales.
STATIC = ("8B up", 4096, 14336)
STATIC_ROWS = (1, 16)
PREFILL_ROWS = 2048
METHODS = ("bf16", "quantlinear", "two_ops", "quantlinear_block", "w4a8", "w4a8_rot", "w4a8_group", "w4a8_group_asym",
           "w4a8_group32", "w4a8_group64", "w4a8_group32_bf16", "w4a8_group64_bf16", "torch_int4", "gemlite_a8w8",
           "gemlite_a16w4")
PREFILL_METHODS = ("bf16", "quantlinear", "quantlinear_block", "w4a8", "w4a8_rot")
# The weight copy each method reads: methods that read the same one share its copies.
WEIGHTS = {"bf16": "bf16", "quantlinear": "channel", "two_ops": "channel", "quantlinear_block": "block",
           "w4a8": "w4a8", "w4a8_rot": "w4a8_rot", "w4a8_group": "w4a8_group", "w4a8_group_asym": "w4a8_group_asym",
           "w4a8_group32": "w4a8_group32", "w4a8_group64": "w4a8_group64", "w4a8_group32_bf16": "w4a8_group32_bf16",
           "w4a8_group64_bf16": "w4a8_group64_bf16", "torch_int4": "torch_int4",
           "gemlite_a8w8": "gemlite_a8w8", "gemlite_a16w4": "gemlite_a16w4"}
# The peers whose Triton kernels tune themselves at each new shape (seconds each): --peer-rows limits them.
PEERS = ("gemlite_a8w8", "gemlite_a16w4")
# The layers --plot draws (speed-up over bf16 against rows) and the methods it draws.
PLOT_LAYERS = ("8B gate+up", "8B down")
PLOT_METHODS = ("quantlinear", "w4a8", "torch_int4", "gemlite_a8w8", "gemlite_a16w4")
CALLS_MIN = 24  # calls per graph or eager loop
ROUNDS = 7
# A method's output on the first copy differs from bf16's by at most this (relative Frobenius norm);
# 4-bit round-to-nearest of nn.Linear's uniform weights gives about 0.07.
CHECK_TOLERANCE = 0.25

INT4_GROUP_SIZE = 128  # torch's int4 peer: torchao Int4WeightOnlyConfig's defaults
INT4_INNER_K_TILES = 8


def int4_weight_only(w: torch.Tensor, group_size: int = INT4_GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """torchao's int4 weight-only quantization (asymmetric, float zero point: tinygemm's format).

    Per group of `group_size` inputs of a row: scale = (max - min) / 15 and zero = min + 8 * scale,
    both bf16; q = clamp(round((w - (zero - 8 * scale)) / scale), 0, 15), so w ~ (q - 8) * scale + zero.
    Returns q, int32 [N, K], and scales_and_zeros, bf16 [K / group_size, N, 2].
    """
    n, k = w.shape
    if k % group_size:
        raise ValueError(f"int4_weight_only: K must be a multiple of group_size ({group_size}), got K = {k}")
    groups = w.detach().float().reshape(n, k // group_size, group_size)
    lo, hi = groups.amin(dim=-1, keepdim=True), groups.amax(dim=-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6).to(torch.bfloat16)
    zero = (lo + 8 * scale.float()).to(torch.bfloat16)
    lowest = zero.float() - 8 * scale.float()
    q = ((groups - lowest) / scale.float()).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    scales_and_zeros = torch.cat([scale, zero], dim=-1).transpose(0, 1).contiguous()
    return q, scales_and_zeros


def pack_int4_tinygemm(q: torch.Tensor, inner_k_tiles: int = INT4_INNER_K_TILES) -> torch.Tensor:
    """q, int32 [N, K] in [0, 15], in the layout torch's int4 matmul reads on q's device.

    CUDA: two values a byte, even k in the high nibble (uint8 [N, K/2]), then
    ``_convert_weight_to_int4pack``; CPU: ``_convert_weight_to_int4pack_for_cpu`` of q itself.
    """
    if q.is_cuda:
        return torch.ops.aten._convert_weight_to_int4pack((q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8),
                                                          inner_k_tiles)
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, inner_k_tiles)


class TorchInt4Linear(torch.nn.Module):
    """torch's int4 weight-only linear on bf16 activations: ``torch.ops.aten._weight_int4pack_mm``
    (tinygemm; ``_weight_int4pack_mm_for_cpu`` on the CPU), the weight quantized and packed as
    torchao's ``Int4WeightOnlyConfig`` does (groups of 128, bf16 scales and zero points,
    inner_k_tiles 8). Buffers: ``weight`` (packed), ``scales_and_zeros`` and ``bias`` (or None)."""

    def __init__(self, in_features: int, out_features: int, weight: torch.Tensor, scales_and_zeros: torch.Tensor,
                 bias: Optional[torch.Tensor] = None, group_size: int = INT4_GROUP_SIZE):
        super().__init__()
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        self.register_buffer("weight", weight)
        self.register_buffer("scales_and_zeros", scales_and_zeros)
        self.register_buffer("bias", bias)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, group_size: int = INT4_GROUP_SIZE,
                    inner_k_tiles: int = INT4_INNER_K_TILES) -> "TorchInt4Linear":
        q, scales_and_zeros = int4_weight_only(linear.weight, group_size)
        bias = None if linear.bias is None else linear.bias.detach().to(torch.bfloat16)
        return cls(linear.in_features, linear.out_features, pack_int4_tinygemm(q, inner_k_tiles), scales_and_zeros,
                   bias, group_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mm = torch.ops.aten._weight_int4pack_mm if self.weight.is_cuda else torch.ops.aten._weight_int4pack_mm_for_cpu
        out = mm(x.reshape(-1, self.in_features), self.weight, self.group_size, self.scales_and_zeros)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def gemlite_a8w8(linear: torch.nn.Linear):
    """gemlite's int8 layer: int8 weights per channel, int8 activations quantized per token
    (``gemlite.helper.A8W8_int8_dynamic``), bf16 out."""
    from gemlite.helper import A8W8_int8_dynamic

    return A8W8_int8_dynamic(device=str(linear.weight.device), dtype=torch.bfloat16).from_linear(linear, del_orig=False)


def gemlite_a16w4(linear: torch.nn.Linear, group_size: int = INT4_GROUP_SIZE):
    """gemlite's 4-bit weight-only layer on bf16 activations (``gemlite.helper.A16Wn``): the same
    asymmetric groups of 128 as torch's int4 peer (int4_weight_only), in gemlite's (HQQ) form
    w = (q - zero) * scale."""
    from gemlite.helper import A16Wn

    q, scales_and_zeros = int4_weight_only(linear.weight, group_size)
    scale = scales_and_zeros[..., 0].t().float()
    zero = 8 - scales_and_zeros[..., 1].t().float() / scale  # tinygemm's w = (q - 8) s + z
    return A16Wn(device=str(linear.weight.device), dtype=torch.bfloat16).from_weights(
        q.to(torch.uint8), scale.to(torch.bfloat16), zero.to(torch.bfloat16), 4, group_size)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's storage; for a wrapper subclass (torchao's quantized weights), of the
    tensors inside it, whose outer dtype is the float one it stands for."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


def layer_bytes(layer: Any) -> int:
    """Bytes of a layer's weight and everything that scales it: each of the module's own tensors but
    its bias (a tensor counts as itself)."""
    if isinstance(layer, torch.Tensor):
        return tensor_bytes(layer)
    tensors = itertools.chain(layer.named_parameters(recurse=False), layer.named_buffers(recurse=False))
    return sum(tensor_bytes(t) for name, t in tensors if name != "bias")


def error_text(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]


@dataclasses.dataclass
class Methods:
    fns: dict[str, Callable[[int], Any]]  # method -> function of the weight copy index
    n_sets: int  # weight copies
    weight_bytes: int  # int8 weight bytes of one copy
    layer_bytes: dict[str, int] = dataclasses.field(default_factory=dict)  # per method, one copy's weight and scales
    errors: dict[str, str] = dataclasses.field(default_factory=dict)  # methods that could not be built


@dataclasses.dataclass
class Weights:
    """The weight copies of one layer shape, per kind (WEIGHTS), built once for every row count."""
    copies: dict[str, list]
    failed: dict[str, str]  # kinds that could not be built
    n_sets: int


def build_weights(k: int, n: int, device, methods: tuple[str, ...] = METHODS) -> Weights:
    """Copies of the same random bf16 weights in the formats the methods named read."""
    import tcgemm

    n_sets = timing.input_sets(n * k // 2, device)
    builders = {
        "bf16": lambda lin: lin.weight.detach(),
        "channel": tcgemm.QuantLinear.from_linear,
        "block": lambda lin: tcgemm.QuantLinear.from_linear(lin, weight="block", activation="block"),
        "w4a8": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme="w4a8"),
        "w4a8_rot": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme=dataclasses.replace(tcgemm.W4A8, rotate=True)),
        "w4a8_group": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme="w4a8-group"),
        "w4a8_group_asym": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme="w4a8-group-asymmetric"),
        "w4a8_group32": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme="w4a8-group32"),
        "w4a8_group64": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme="w4a8-group64"),
        "w4a8_group32_bf16": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme="w4a8-group32",
                                                                        scale_dtype=torch.bfloat16),
        "w4a8_group64_bf16": lambda lin: tcgemm.QuantLinear.from_linear(lin, scheme="w4a8-group64",
                                                                        scale_dtype=torch.bfloat16),
        "torch_int4": TorchInt4Linear.from_linear,
        "gemlite_a8w8": gemlite_a8w8,
        "gemlite_a16w4": gemlite_a16w4,
    }
    kinds = list(dict.fromkeys(WEIGHTS[name] for name in methods))
    copies: dict[str, list] = {kind: [] for kind in kinds}
    failed: dict[str, str] = {}
    for _ in range(n_sets):
        lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
        for kind in kinds:
            if kind in failed:
                continue
            try:
                copies[kind].append(builders[kind](lin))
            except Exception as exc:
                failed[kind] = error_text(exc)
                copies[kind] = []
        del lin
    return Weights(copies, failed, n_sets)


def make_methods(k: int, n: int, m: int, device, methods: tuple[str, ...] = METHODS,
                 weights: Optional[Weights] = None) -> Methods:
    """The methods named at M = m, each over its own copies of the same random bf16 weights
    (`weights`, or built here)."""
    import tcgemm

    built = weights if weights is not None else build_weights(k, n, device, methods)
    copies, failed, n_sets = built.copies, built.failed, built.n_sets
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)

    def two_ops(i):
        layer = copies["channel"][i]
        q, s = tcgemm.quantize(x, "token")
        return tcgemm.scaled_gemm(q, layer.weight.t(), s, layer.weight_scale, None, out_dtype=x.dtype)

    calls = {
        "bf16": lambda i: F.linear(x, copies["bf16"][i]),
        "quantlinear": lambda i: copies["channel"][i](x),
        "two_ops": two_ops,
        "quantlinear_block": lambda i: copies["block"][i](x),
        "w4a8": lambda i: copies["w4a8"][i](x),
        "w4a8_rot": lambda i: copies["w4a8_rot"][i](x),
        "w4a8_group": lambda i: copies["w4a8_group"][i](x),
        "w4a8_group_asym": lambda i: copies["w4a8_group_asym"][i](x),
        "w4a8_group32": lambda i: copies["w4a8_group32"][i](x),
        "w4a8_group64": lambda i: copies["w4a8_group64"][i](x),
        "w4a8_group32_bf16": lambda i: copies["w4a8_group32_bf16"][i](x),
        "w4a8_group64_bf16": lambda i: copies["w4a8_group64_bf16"][i](x),
        "torch_int4": lambda i: copies["torch_int4"][i](x),
        "gemlite_a8w8": lambda i: copies["gemlite_a8w8"][i](x),
        "gemlite_a16w4": lambda i: copies["gemlite_a16w4"][i](x),
    }
    fns = {name: calls[name] for name in methods if WEIGHTS[name] not in failed}
    return Methods(fns, n_sets, n * k, {name: layer_bytes(copies[WEIGHTS[name]][0]) for name in fns},
                   {name: failed[WEIGHTS[name]] for name in methods if WEIGHTS[name] in failed})


def _loop(fn: Callable[[int], Any], n_sets: int, calls: int) -> Callable[[], None]:
    def run():
        for c in range(calls):
            fn(c % n_sets)
    return run


def _runner(fn: Callable[[int], Any], n_sets: int, calls: int, graphs: bool) -> Callable[[], None]:
    """The loop of `calls` calls, warmed up; with `graphs`, captured and replayed."""
    loop = _loop(fn, n_sets, calls)
    if not graphs:
        loop()
        return loop
    graph = timing.capture_graph(loop, warmup=1)
    graph.replay()
    return graph.replay


def time_methods(fns: dict[str, Callable[[int], Any]], n_sets: int, graphs: bool,
                 errors: Optional[dict[str, str]] = None) -> dict[str, float]:
    """Median over ROUNDS of the per-call time (us), methods interleaved within each round, the
    order rotated from round to round. With `errors` given, a method that fails to warm up or to
    be captured is recorded there instead of stopping the others."""
    calls = max(CALLS_MIN, n_sets * math.ceil(CALLS_MIN / n_sets))
    runners = {}
    for name, fn in fns.items():
        try:
            runners[name] = _runner(fn, n_sets, calls, graphs)
        except Exception as exc:
            if errors is None:
                raise
            errors[name] = error_text(exc)
    torch.cuda.synchronize()
    names = list(runners)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(ROUNDS):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            run = runners[name]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / calls)
    return {name: statistics.median(v) for name, v in times.items()}


def host_times(device) -> dict[str, float]:
    """Host time per call (us) of a small layer: QuantLinear against nn.Linear."""
    import tcgemm

    lin = torch.nn.Linear(256, 256, device=device, dtype=torch.bfloat16)
    qlin = tcgemm.QuantLinear.from_linear(lin)
    x = torch.randn(1, 256, device=device, dtype=torch.bfloat16)
    out = {}
    with torch.no_grad():
        for _ in range(3):  # interleaved; the best of three rounds of each
            for name, fn in (("nn.Linear", lambda: lin(x)), ("QuantLinear", lambda: qlin(x))):
                out[name] = min(out.get(name, math.inf), timing.host_us(fn))
    return out


def check_outputs(fns: dict[str, Callable[[int], Any]], errors: dict[str, str]) -> dict[str, float]:
    """Each method's output on the first copy against bf16's: the relative difference (Frobenius
    norm). A method that raises moves from fns to errors."""
    if "bf16" not in fns:
        return {}
    ref = fns["bf16"](0).float()
    out = {}
    for name, fn in list(fns.items()):
        if name == "bf16":
            continue
        try:
            out[name] = float((fn(0).float() - ref).norm() / ref.norm())
        except Exception as exc:
            errors[name] = error_text(exc)
            del fns[name]
    torch.cuda.synchronize()
    return out


def measure(name: str, k: int, n: int, m: int, make: Callable[[], Methods], eager: bool = True,
            text: Optional[Callable[[dict], str]] = None) -> dict[str, Any]:
    """One layer shape: the methods make() builds (their weight copies freed after), checked
    against bf16, timed with graphs and (eager) without; the record, printed as it is measured."""
    made = make()
    fns, errors = made.fns, dict(made.errors)
    rec: dict[str, Any] = {"layer": name, "k": k, "n": n, "m": m, "weight_bytes": made.weight_bytes,
                           "bytes": made.layer_bytes, "rel_err": check_outputs(fns, errors)}
    rec["graph"] = time_methods({key: fn for key, fn in fns.items() if key not in errors}, made.n_sets, True, errors)
    if eager:
        rec["eager"] = time_methods({key: fn for key, fn in fns.items() if key not in errors}, made.n_sets, False,
                                    errors)
    rec["errors"] = errors
    print((text or row_text)(rec), flush=True)
    del made, fns
    torch.cuda.empty_cache()
    return rec


def static_text(rec: dict[str, Any]) -> str:
    return f"static vs token {rec['layer']} M={rec['m']}: graph {rec['graph']}, eager {rec['eager']}"


def run(args) -> dict[str, Any]:
    device = torch.device("cuda", torch.cuda.current_device())
    meta = report.run_metadata(device, report.command_line("benchmarks.bench_decode", args.argv))
    layers, rows = select_layers(args.layers, args.quick), args.rows or ((1, 16) if args.quick else ROWS)
    methods = select_methods(args.methods)
    prefill_methods = tuple(m for m in PREFILL_METHODS if m in methods)
    records, prefill, static = [], [], []
    with torch.no_grad(), gemlite_configs(args.gemlite_config if any(m in PEERS for m in methods) else None):
        for name, k, n in layers:
            weights = build_weights(k, n, device, methods)
            for m in rows:
                at_m = tuple(key for key in methods if key not in PEERS or args.peer_rows is None or m <= args.peer_rows)
                records.append(measure(name, k, n, m, lambda: make_methods(k, n, m, device, at_m, weights),
                                       eager=not args.decode_only))
            del weights
            torch.cuda.empty_cache()
        if not args.decode_only:
            prefill = [measure(name, k, n, PREFILL_ROWS,
                               lambda: make_methods(k, n, PREFILL_ROWS, device, prefill_methods), eager=False)
                       for name, k, n in (PREFILL if prefill_methods else [])]
            name, k, n = STATIC
            static = [measure(name, k, n, m, lambda: static_methods(k, n, m, device), text=static_text)
                      for m in STATIC_ROWS]
        host = host_times(device)
    print(f"host us/call: {host}")
    return {"meta": meta, "decode": records, "prefill": prefill, "static": static, "host_us": host}


@contextlib.contextmanager
def gemlite_configs(path: Optional[Path]):
    """gemlite's tuned configs read from `path` (where it exists) for the block, and what the block
    tuned added to it after, also when the block fails part way (None: nothing either way)."""
    if path is None:
        yield
        return
    from gemlite.core import GemLiteLinear

    if path.exists():
        GemLiteLinear.load_config(str(path))
    try:
        yield
    finally:
        GemLiteLinear.cache_config(str(path))
        print(f"bench_decode: gemlite's tuned configs written to {path}")


def select_layers(names: Optional[str], quick: bool) -> list[tuple[str, int, int]]:
    """The decode layers to time: those named in a comma-separated list (spaces in a name may be
    written as '_', e.g. "8B_qkv,70B_o"; of LAYERS and SPLIT_LAYERS), else the quick three or all
    of LAYERS."""
    if not names:
        return LAYERS[:2] + LAYERS[3:4] if quick else LAYERS
    by_name = {name.replace(" ", "_"): (name, k, n) for name, k, n in LAYERS + SPLIT_LAYERS}
    chosen = []
    for item in names.split(","):
        key = item.strip().replace(" ", "_")
        if key not in by_name:
            raise ValueError(f"bench_decode: --layers: unknown layer '{item}' (known: {', '.join(by_name)})")
        chosen.append(by_name[key])
    return chosen


def layer_bench_args(p: "argparse.ArgumentParser", argv, prog: str, default: Optional[str], default_help: str):
    """A benchmark over bench_decode's layers: adds its --layers to parser p (default: `default`,
    described as `default_help`; None is all of LAYERS), parses argv and checks for a CUDA device.
    Returns (args, layers, device), or None after saying why not."""
    p.add_argument("--layers", default=default,
                   help=f"comma-separated layers of bench_decode (spaces as '_'; default: {default_help})")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print(f"{prog}: needs a CUDA device")
        return None
    return args, select_layers(args.layers, quick=False), torch.device("cuda")


def select_methods(spec: Optional[str]) -> tuple[str, ...]:
    """The methods named in a comma-separated list, in the order of METHODS; all of them for None."""
    return tuple(report.select_names(METHODS, spec, "bench_decode: --methods"))


def static_methods(k: int, n: int, m: int, device) -> Methods:
    """QuantLinear with dynamic per-token and with static per-tensor activation scales."""
    import tcgemm

    n_sets = max(2, math.ceil(3 * timing.l2_bytes(device) / (n * k)))
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    amax = x.float().abs().amax(dim=0)
    dynamic, static = [], []
    for _ in range(n_sets):
        lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
        dynamic.append(tcgemm.QuantLinear.from_linear(lin))
        static.append(tcgemm.QuantLinear.from_linear(lin, activation="static", input_amax=amax))
        del lin
    return Methods({"token": lambda i: dynamic[i](x), "static": lambda i: static[i](x)}, n_sets, n * k,
                   {"token": layer_bytes(dynamic[0]), "static": layer_bytes(static[0])})


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


LABELS = {"bf16": "bf16", "quantlinear": "QuantLinear", "two_ops": "two ops", "quantlinear_block": "QuantLinear block",
          "w4a8": "W4A8", "w4a8_rot": "W4A8 rotated", "w4a8_group": "W4A8 group",
          "w4a8_group_asym": "W4A8 group, zero points", "w4a8_group32": "W4A8 group 32",
          "w4a8_group64": "W4A8 group 64", "w4a8_group32_bf16": "W4A8 group 32, bf16 scales",
          "w4a8_group64_bf16": "W4A8 group 64, bf16 scales", "torch_int4": "torch int4",
          "gemlite_a8w8": "gemlite A8W8",
          "gemlite_a16w4": "gemlite A16W4", "token": "QuantLinear token", "static": "QuantLinear static"}


def row_text(rec: dict[str, Any]) -> str:
    g = rec["graph"]
    parts = [f"{rec['layer']:>10s} M={rec['m']:<5d}"]
    parts += [f"{k}={v:7.1f}" for k, v in g.items()]
    parts.append(f"graph speed-up {ratio(g.get('bf16'), g.get('quantlinear'))}")
    if "w4a8" in g:
        parts.append(f"W4A8 {ratio(g.get('bf16'), g['w4a8'])}, x torch int4 {ratio(g.get('torch_int4'), g['w4a8'])}")
    if "w4a8_rot" in g:
        parts.append(f"W4A8 rotated {ratio(g.get('bf16'), g['w4a8_rot'])}")
    if "eager" in rec:
        parts.append(f"eager {ratio(rec['eager'].get('bf16'), rec['eager'].get('quantlinear'))}")
    parts += [f"{LABELS.get(k, k)} off bf16 by {v:.2f}" for k, v in rec.get("rel_err", {}).items()
              if v > CHECK_TOLERANCE]
    parts += [f"{LABELS.get(k, k)} failed ({v})" for k, v in rec.get("errors", {}).items()]
    return "  ".join(parts)


def us(rec: dict[str, Any], mode: str, key: str) -> str:
    """A method's time as a table cell: "error" where it failed, "-" where it did not run."""
    times = rec.get(mode, {})
    if key in times:
        return f"{times[key]:.1f}"
    return "error" if key in rec.get("errors", {}) else "-"


def stream(rec: dict[str, Any], key: str, nbytes: Optional[int]) -> str:
    """TB/s of `nbytes` read in the method's graph time."""
    t = rec["graph"].get(key)
    return "-" if not t or not nbytes else f"{nbytes / (t * 1e-6) / 1e12:.2f}"


def notes(records: list[dict[str, Any]]) -> list[str]:
    """Methods that failed, and methods whose output is off bf16's, each message once with the
    layers where it happened."""
    where: dict[tuple[str, str], list[str]] = {}
    for r in records:
        at = f"{r['layer']} M={r['m']}"
        for key, err in r.get("rel_err", {}).items():
            if err > CHECK_TOLERANCE:
                message = (f"output off bf16's by more than {CHECK_TOLERANCE} (relative): its times are not of a "
                           "correct layer")
                where.setdefault((LABELS.get(key, key), message), []).append(f"{at}: {err:.2f}")
        for key, message in r.get("errors", {}).items():
            where.setdefault((LABELS.get(key, key), message), []).append(at)
    return [f"- {label} ({', '.join(ats)}): {message}" for (label, message), ats in where.items()]


def has(records: list[dict[str, Any]], key: str) -> bool:
    """Whether a method was part of the records (timed or failed)."""
    return any(key in r["graph"] or key in r.get("errors", {}) for r in records)


def rows_sweep(doc: dict[str, Any]) -> bool:
    """Whether a result is a --decode-only run (CUDA graphs alone: no eager timings, no prefill),
    whose tables go to the "bench_decode rows" section rather than "bench_decode"."""
    return not doc["prefill"] and not doc.get("static") and not any(r.get("eager") for r in doc["decode"])


def markdown(doc: dict[str, Any], command: Optional[str] = None) -> dict[str, str]:
    """The result's sections for report.update_markdown: "bench_decode rows" for a --decode-only
    run with 4-bit methods (the 4-bit table), else "bench_decode"."""
    header = report.header_line(doc["meta"], command)
    rows = []
    for r in doc["decode"]:
        g, e = r["graph"], r.get("eager", {})
        rows.append([r["layer"], f"{r['k']}->{r['n']}", str(r["m"]), us(r, "graph", "bf16"),
                     us(r, "graph", "quantlinear"), ratio(g.get("bf16"), g.get("quantlinear")),
                     stream(r, "quantlinear", r["weight_bytes"]), ratio(g.get("bf16"), g.get("two_ops")),
                     ratio(g.get("bf16"), g.get("quantlinear_block")), us(r, "eager", "bf16"),
                     us(r, "eager", "quantlinear"), ratio(e.get("bf16"), e.get("quantlinear"))])
    headers = ["layer", "K->N", "M", "graph bf16 us", "graph QuantLinear us", "speed-up", "int8 weight TB/s",
               "two ops speed-up", "block speed-up", "eager bf16 us", "eager QuantLinear us", "eager speed-up"]
    legend = ("Per call, a decode step's view: rotated weight copies (3x the L2 in the 4-bit format), fixed input "
              "rows. graph: one CUDA graph of the calls, replayed; eager: the same calls from Python (host time "
              "included). QuantLinear: per-channel weight, per-token activations, one op (`tcgemm.quant_linear`: one "
              "kernel where x holds at most 8192 values, up to 4 rows; else quantize and GEMM as overlapped "
              "launches); two ops: `quantize` then `scaled_gemm`; block: 128x128 weight and 1x128 activation scales. "
              "Speed-ups are against bf16 `F.linear`, timed in the same process.")
    tables = [legend, report.markdown_table(headers, rows, align_left=2)]
    four_bit = has(doc["decode"], "w4a8") or has(doc["decode"], "torch_int4")
    if four_bit:
        gem = has(doc["decode"], "gemlite_a8w8") or has(doc["decode"], "gemlite_a16w4")
        four = []
        for r in doc["decode"]:
            g = r["graph"]
            four.append([r["layer"], f"{r['k']}->{r['n']}", str(r["m"]), us(r, "graph", "bf16"),
                         us(r, "graph", "quantlinear"), us(r, "graph", "w4a8"), us(r, "graph", "torch_int4")]
                        + ([us(r, "graph", "gemlite_a8w8"), us(r, "graph", "gemlite_a16w4")] if gem else [])
                        + [ratio(g.get("bf16"), g.get("quantlinear")), ratio(g.get("bf16"), g.get("w4a8")),
                           ratio(g.get("quantlinear"), g.get("w4a8")), ratio(g.get("bf16"), g.get("torch_int4")),
                           ratio(g.get("torch_int4"), g.get("w4a8"))]
                        + ([ratio(g.get("gemlite_a8w8"), g.get("quantlinear")),
                            ratio(g.get("gemlite_a16w4"), g.get("w4a8"))] if gem else [])
                        + [stream(r, "w4a8", r.get("bytes", {}).get("w4a8"))])
        tables += [
            ("4-bit weights, CUDA graphs, same rotation. W8A8: `QuantLinear`, int8 weights per channel and "
             "activations per token; W4A8: "
             "`QuantLinear(scheme=\"w4a8\")`, 4-bit weights with an fp32 scale per channel and int8 scales per 128 "
             "inputs, int8 activations per token; torch int4: `torch.ops.aten._weight_int4pack_mm` (tinygemm) on "
             "bf16 activations, the weight as torchao's `Int4WeightOnlyConfig` packs it (groups of 128, bf16 "
             "scales and zero points, inner_k_tiles 8)"
             + ("; gemlite A8W8: `gemlite.helper.A8W8_int8_dynamic` (int8 per channel, activations per token); "
                "gemlite A16W4: `gemlite.helper.A16Wn`, the same 4-bit groups as torch int4, bf16 activations "
                "(gemlite's Triton configs tuned on first use)" if gem else "")
             + ". x: the speed-up over the method named; W4A8 weight TB/s: its packed weight and scales over the "
             "call time."),
            report.markdown_table(["layer", "K->N", "M", "bf16 us", "W8A8 us", "W4A8 us", "torch int4 us"]
                                  + (["gemlite A8W8 us", "gemlite A16W4 us"] if gem else [])
                                  + ["W8A8 x bf16", "W4A8 x bf16", "W4A8 x W8A8", "torch int4 x bf16",
                                     "W4A8 x torch int4"]
                                  + (["W8A8 x gemlite A8W8", "W4A8 x gemlite A16W4"] if gem else [])
                                  + ["W4A8 weight TB/s"], four, align_left=2)]
    failures = notes(doc["decode"] + doc["prefill"] + doc.get("static", []))
    failed = ["Not measured, or not of a correct result:\n\n" + "\n".join(failures)] if failures else []
    if four_bit and rows_sweep(doc):
        return {"bench_decode rows": "\n\n".join(
            ["## Rows per step: W4A8, W8A8 and the peers", header, *tables[2:]] + failed)}
    pre_w4 = has(doc["prefill"], "w4a8")
    pre_rows = []
    for r in doc["prefill"]:
        g = r["graph"]
        pre_rows.append([r["layer"], f"{r['k']}->{r['n']}", str(r["m"]), us(r, "graph", "bf16"),
                         us(r, "graph", "quantlinear"), ratio(g.get("bf16"), g.get("quantlinear")),
                         ratio(g.get("bf16"), g.get("quantlinear_block"))]
                        + ([ratio(g.get("bf16"), g.get("w4a8"))] if pre_w4 else []))
    if pre_rows:
        tables.append(report.markdown_table(["layer", "K->N", "M", "bf16 us", "QuantLinear us", "speed-up",
                                             "block speed-up"] + (["W4A8 speed-up"] if pre_w4 else []),
                                            pre_rows, align_left=2))
    static_rows = [[r["layer"], f"{r['k']}->{r['n']}", str(r["m"]), us(r, "graph", "token"), us(r, "graph", "static"),
                    ratio(r["graph"].get("token"), r["graph"].get("static")), us(r, "eager", "token"),
                    us(r, "eager", "static"), ratio(r.get("eager", {}).get("token"), r.get("eager", {}).get("static"))]
                   for r in doc.get("static", [])]
    host = doc["host_us"]
    host_line = (f"Host time per call, 256->256 layer at M = 1 (`timing.host_us`): nn.Linear {host['nn.Linear']:.1f} us, "
                 f"QuantLinear {host['QuantLinear']:.1f} us ({host['QuantLinear'] / host['nn.Linear']:.2f}x).")
    body = "\n\n".join([
        "## Decode: QuantLinear against bf16 at a few rows", header, *tables, host_line,
    ] + ([("Static (calibrated per-tensor, `activation=\"static\"`) against dynamic per-token activation "
           "scales, `QuantLinear`, same rotation; speed-up of static over dynamic:"),
          report.markdown_table(["layer", "K->N", "M", "graph token us", "graph static us", "static speed-up",
                                 "eager token us", "eager static us", "eager static speed-up"],
                                static_rows, align_left=2)] if static_rows else [])
      + failed)
    return {"bench_decode": body}


# The README's table: per layer, the speed-up over bf16 of W4A8 / W8A8 at each row count.
README_SECTION = "bench_decode readme"


def readme_table(doc: dict[str, Any]) -> str:
    """The README's summary of a rows sweep: one line naming the run, then per layer its bf16 time
    at the fewest rows and, per row count, "W4A8 / W8A8" speed-ups over bf16 (CUDA graphs)."""
    recs = doc["decode"]
    names = list(dict.fromkeys(r["layer"] for r in recs))
    counts = sorted({r["m"] for r in recs})
    at = {(r["layer"], r["m"]): r for r in recs}

    def cell(r: Optional[dict[str, Any]]) -> str:
        g = (r or {}).get("graph", {})
        return " / ".join(ratio(g.get("bf16"), g.get(key)).rstrip("x") for key in ("w4a8", "quantlinear"))

    lines = []
    for name in names:
        first = next(at[(name, m)] for m in counts if (name, m) in at)
        lines.append([f"{name} ({first['k']}->{first['n']})", us(first, "graph", "bf16")]
                     + [cell(at.get((name, m))) for m in counts])
    meta = doc["meta"]
    date = (meta.get("date") or "")[:16].replace("T", " ")
    caption = ("Speed-up over bf16 `nn.Linear` per layer by rows per step (tokens in a decode step, or a "
               f"prompt), W4A8 / W8A8, CUDA graphs, one process ({meta.get('device', '?')}, "
               f"{date} UTC, torch {meta.get('torch', '?')}; `{meta.get('command', 'command not recorded')}`). "
               "W8A8: `QuantLinear`, int8 weights per channel; W4A8: `scheme=\"w4a8\"`.")
    headers = ["layer (K->N)", f"bf16 us, {counts[0]} row{'s' if counts[0] > 1 else ''}"] + [
        f"{m} row{'s' if m > 1 else ''}" for m in counts]
    return caption + "\n\n" + report.markdown_table(headers, lines, align_left=1)


def plot(doc: dict[str, Any], path: Path) -> None:
    """Speed-up over bf16 (CUDA graphs) against rows, one panel per layer of PLOT_LAYERS, one line per
    method of PLOT_METHODS that ran."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: skipping the plot")
        return
    layers = [name for name in PLOT_LAYERS if any(r["layer"] == name for r in doc["decode"])]
    if not layers:
        print(f"bench_decode: --plot draws {', '.join(PLOT_LAYERS)}, none of which ran")
        return
    fig, axes = plt.subplots(1, len(layers), figsize=(6 * len(layers), 4.2), squeeze=False)
    for ax, name in zip(axes[0], layers):
        recs = sorted((r for r in doc["decode"] if r["layer"] == name), key=lambda r: r["m"])
        for key in PLOT_METHODS:
            pts = [(r["m"], r["graph"]["bf16"] / r["graph"][key]) for r in recs
                   if r["graph"].get(key) and r["graph"].get("bf16")]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=LABELS[key])
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks([r["m"] for r in recs], [str(r["m"]) for r in recs])
        ax.set_xlabel("rows (tokens per step)")
        ax.set_ylabel("speed-up over bf16")
        k, n = recs[0]["k"], recs[0]["n"]
        ax.set_title(f"{name} ({k} -> {n})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    meta = doc["meta"]
    fig.suptitle(f"{meta.get('device', '')}, {meta.get('date', '')[:10]}, CUDA graphs", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.bench_decode", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="three layers at M = 1 and 16")
    p.add_argument("--layers", default=None, help="comma-separated decode layers, e.g. 8B_qkv,70B_o (default: all, "
                   "or the quick three; 8B_kv and 8B_up only when named)")
    p.add_argument("--rows", type=int, nargs="+", default=None, help="decode row counts (default: 1 4 16, quick 1 16)")
    p.add_argument("--methods", default=None, help=f"comma-separated methods among {', '.join(METHODS)} "
                   "(default: all; prefill times those of them it has)")
    p.add_argument("--decode-only", action="store_true",
                   help="the decode layers alone, with CUDA graphs: no eager timings, prefill or static rows")
    p.add_argument("--peer-rows", type=int, default=None,
                   help=f"time {' and '.join(PEERS)} only up to this many rows (they tune themselves per shape)")
    p.add_argument("--plot", type=Path, default=None,
                   help=f"draw the speed-up over bf16 against rows for {' and '.join(PLOT_LAYERS)} into this PNG")
    p.add_argument("--readme", type=Path, default=None,
                   help=f"write the W4A8 / W8A8 speed-up table of a rows sweep into this file's "
                        f"'{README_SECTION}' section (README.md)")
    p.add_argument("--gemlite-config", type=Path, default=None,
                   help="gemlite's tuned kernel configs: read from this JSON file before the run where it exists, "
                        "and the run's added to it after, so that a sweep need not tune every shape again")
    report.add_result_args(p, "bench_decode")
    args = p.parse_args(argv)
    try:  # a bad selection fails here, before any GPU work
        select_layers(args.layers, args.quick)
        select_methods(args.methods)
    except ValueError as e:
        p.error(str(e))
    if args.rows and min(args.rows) < 1:
        p.error(f"--rows: row counts must be at least 1, got {args.rows}")
    args.argv = argv
    doc = report.result_doc(args, "bench_decode", run)
    if doc is None:
        return 1
    if args.markdown:
        report.update_markdown(args.markdown, markdown(doc))
    if args.readme:
        report.update_markdown(args.readme, {README_SECTION: readme_table(doc)})
    if args.plot:
        plot(doc, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

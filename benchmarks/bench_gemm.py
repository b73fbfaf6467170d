"""Benchmark tcgemm INT8 GEMM backends against cuBLASLt, torch._int_mm, bf16 and fp8.

    python3 -m benchmarks.bench_gemm [--sweep square|mrange|bars|all] [--quick] [--no-peers]
                                     [--markdown FILE] [--plot PNG] [--json PATH]
    python3 -m benchmarks.bench_gemm --render RESULTS.json --markdown FILE    (no GPU needed)

Method: every point uses the "TN" nn.Linear layout, a[M,K] row-major times w.t() with w a
contiguous [N,K] weight; all series run in the same process on the same random full-range int8
inputs (the bf16/fp8 peers get converted copies). Timing is benchmarks/timing.py: rotated input
sets exceeding 3x L2, device events, warm-up, the median of up to --reps repetitions, reported as
TOPS = 2*M*N*K / time / 1e12. Every tcgemm backend and every cuBLASLt algorithm is checked for
bit-exactness at every shape against torch._int_mm (or, where _int_mm rejects the shape, an fp64
GPU matmul, exact for these magnitudes); inexact results are flagged loudly. cuBLASLt reports the
best of its top-4 heuristic algorithms with a 32 MiB workspace (see cublaslt_peer.cpp).
Raw output (JSON, the M-range plot) goes to benchmarks/results/; --markdown writes the tables into
a markdown file (docs/performance.md), replacing only the sections this sweep produced.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Optional

import torch

from benchmarks import report, timing

Shape = tuple[int, int, int]  # (M, N, K)
GemmFn = Callable[[int], torch.Tensor]  # input-set index -> output

HERE = Path(__file__).resolve().parent
SQUARE_SIZES = (1024, 2048, 4096, 8192, 16384)
MRANGE_MS = tuple(2**i for i in range(15))  # 1 .. 16384
MRANGE_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672))
QUICK_SHAPES: tuple[Shape, ...] = ((4096, 4096, 4096), (8192, 8192, 8192)) + tuple(
    (m, 4096, 4096) for m in (1, 16, 128, 512, 4096)
)
# The shapes the sm90 kernel's bars name: large, mid M and small M against N = K = 8192.
BARS_SHAPES: tuple[Shape, ...] = (
    (4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336), (2048, 28672, 8192),
    (128, 8192, 8192), (256, 8192, 8192), (512, 8192, 8192),
    (1, 8192, 8192), (16, 8192, 8192), (32, 8192, 8192), (64, 8192, 8192),
)
SWEEPS = ("square", "mrange", "bars", "quick", "custom")
SWEEP_TITLES = {
    "square": "INT8 GEMM, square shapes",
    "mrange": "INT8 GEMM, M from 1 to 16384 at model widths (N, K)",
    "bars": "INT8 GEMM, large, mid and small M",
    "quick": "INT8 GEMM, quick sweep",
    "custom": "INT8 GEMM, chosen shapes",
}
SLOW_BACKENDS = ("wmma_simple",)
# The skinny kernel is for a few rows (auto takes it for M <= 8); larger M only wastes the run.
FEW_ROWS_BACKENDS = ("skinny",)
FEW_ROWS_MAX_M = 64
PEERS = ("cublasLt", "_int_mm", "bf16", "fp8")
INT8_PEERS = ("cublasLt", "_int_mm")
PEER_TITLES = {"cublasLt": "cuBLASLt", "_int_mm": "torch._int_mm", "bf16": "bf16", "fp8": "fp8"}

CUBLASLT_WORKSPACE_BYTES = 32 * 1024 * 1024
CUBLASLT_TOP_ALGOS = 4
SENTINEL = torch.iinfo(torch.int32).min  # never a valid int8 x int8 dot product here
INPUT_BUDGET_BYTES = 24 * 1024**3  # int8 + bf16 + fp8 copies of all sets


@dataclass
class InputSets:
    """Rotated operands: set i is (a[i], w[i]) plus bf16/fp8 copies of it when peers run."""

    a: list[torch.Tensor]
    w: list[torch.Tensor]
    a_bf16: list[torch.Tensor] = field(default_factory=list)
    w_bf16: list[torch.Tensor] = field(default_factory=list)
    a_fp8: list[torch.Tensor] = field(default_factory=list)
    w_fp8: list[torch.Tensor] = field(default_factory=list)
    scale_a: Optional[torch.Tensor] = None  # [M,1] fp32
    scale_b: Optional[torch.Tensor] = None  # [1,N] fp32

    def __len__(self) -> int:
        return len(self.a)


@dataclass
class Result:
    ms: Optional[float] = None
    exact: Optional[bool] = None  # None: not checked (bf16/fp8) or not run
    error: Optional[str] = None


@dataclass
class ShapeReport:
    shape: Shape
    n_sets: int
    reference: str
    results: dict[str, Result] = field(default_factory=dict)
    cublaslt_algos: list[dict[str, Any]] = field(default_factory=list)


# ----------------------------------------------------------------------------- setup


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.bench_gemm", description=__doc__.splitlines()[0])
    p.add_argument("--sweep", choices=SWEEPS + ("all",), default="all",
                   help="which shapes (all = square, mrange and bars); with --render, which sections")
    p.add_argument("--quick", action="store_true",
                   help="4096^3, 8192^3 and M in {1,16,128,512,4096} on N=K=4096 (same as --sweep quick)")
    p.add_argument("--shapes", default=None, metavar="MxNxK,...",
                   help="time these shapes instead of a sweep (their sweep is called 'custom')")
    p.add_argument("--backends", default=None,
                   help="comma-separated tcgemm backends (default: all available except wmma_simple)")
    p.add_argument("--include-simple", action="store_true",
                   help="also benchmark the slow wmma_simple fallback")
    p.add_argument("--no-peers", action="store_true",
                   help="time the tcgemm backends only (no cuBLASLt, _int_mm, bf16, fp8): short A/B rounds")
    p.add_argument("--reps", type=int, default=timing.MAX_REPS,
                   help=f"max timed repetitions per measurement (fewer, but at least {timing.MIN_REPS}, "
                        f"when a measurement would exceed {timing.BUDGET_MS:.0f} ms)")
    p.add_argument("--out", type=Path, default=report.RESULTS_DIR,
                   help="output directory for the JSON and the plot (default: benchmarks/results)")
    p.add_argument("--json", type=Path, default=None, help="JSON path (default: OUT/bench_gemm.json)")
    p.add_argument("--plot", type=Path, default=None,
                   help="PNG path of the M-range plot (default: OUT/bench_gemm_mrange.png); "
                        "a --markdown file links the plot when --plot is given")
    p.add_argument("--markdown", type=Path, default=None,
                   help="write the tables into this markdown file (its sections for these sweeps)")
    p.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                   help="no benchmark: read a JSON this script wrote and print/write its tables")
    p.add_argument("--command", default=None,
                   help="with --render: the command to name for a JSON that does not record its own")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error("--reps must be >= 1")
    if args.quick:
        args.sweep = "quick"
    args.custom = []
    if args.shapes:
        try:
            args.custom = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",") if s.strip()]
        except ValueError:
            p.error("--shapes takes MxNxK,... (e.g. 16x8192x8192,1x4096x4096)")
        if not args.custom or any(len(s) != 3 or min(s) < 1 for s in args.custom):
            p.error("--shapes takes MxNxK,... with positive sizes")
        args.sweep = "custom"
    elif args.sweep == "custom" and not args.render:
        p.error("--sweep custom needs --shapes")
    if args.command and not args.render:
        p.error("--command goes with --render")
    args.plot_given = args.plot is not None
    args.json = args.json or args.out / "bench_gemm.json"
    args.plot = args.plot or args.out / "bench_gemm_mrange.png"
    return args


def select_shapes(sweep: str, custom: list[Shape]) -> dict[Shape, list[str]]:
    """Ordered, de-duplicated shapes mapped to the sweeps they belong to."""
    groups: list[tuple[str, list[Shape]]] = []
    if sweep == "custom":
        groups.append(("custom", list(custom)))
    if sweep == "quick":
        groups.append(("quick", list(QUICK_SHAPES)))
    if sweep in ("square", "all"):
        groups.append(("square", [(s, s, s) for s in SQUARE_SIZES]))
    if sweep in ("mrange", "all"):
        groups.append(("mrange", [(m, n, k) for n, k in MRANGE_NK for m in MRANGE_MS]))
    if sweep in ("bars", "all"):
        groups.append(("bars", list(BARS_SHAPES)))
    shapes: dict[Shape, list[str]] = {}
    for name, group in groups:
        for shape in group:
            names = shapes.setdefault(shape, [])
            if name not in names:
                names.append(name)
    return shapes


def load_tcgemm(device: torch.device, requested: Optional[str],
                include_simple: bool) -> tuple[Optional[ModuleType], list[str]]:
    try:
        import tcgemm

        available = tcgemm.backends_for("int8_gemm", device=device)
    except Exception as exc:  # benchmark the peers anyway
        print(f"!!! tcgemm unusable ({type(exc).__name__}: {exc}); running peers only")
        return None, []
    print(f"tcgemm {os.path.dirname(tcgemm.__file__)}, backends that run int8_gemm here: {available}")
    if requested is None:
        return tcgemm, [b for b in available if include_simple or b not in SLOW_BACKENDS]
    wanted = [b.strip() for b in requested.split(",") if b.strip()]
    missing = [b for b in wanted if b not in available]
    if missing:
        print(f"!!! requested backends not available, skipped: {missing}")
    return tcgemm, [b for b in wanted if b in available]


def load_cublaslt_peer(device: torch.device) -> tuple[Any, Optional[bool]]:
    """JIT-build and self-check the cuBLASLt peer (build directory in the temp dir).

    Returns (module, self_check_exact), or (None, None) if it cannot be used.
    """
    from torch.utils.cpp_extension import load

    build_dir = Path(tempfile.gettempdir()) / "tcgemm_cublaslt_peer_build"
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        peer = load(
            name="tcgemm_cublaslt_peer",
            sources=[str(HERE / "cublaslt_peer.cpp")],
            extra_cflags=["-O2"],
            extra_ldflags=["-lcublasLt"],
            build_directory=str(build_dir),
            with_cuda=True,
            verbose=False,
        )
        exact = cublaslt_self_check(peer, device)
    except Exception as exc:
        print(f"!!! cuBLASLt peer unavailable, continuing without it:\n{exc}")
        return None, None
    return peer, exact


def cublaslt_self_check(peer: Any, device: torch.device, shape: Shape = (64, 96, 128)) -> bool:
    """Run every heuristic algorithm on a small shape vs an int64 CPU matmul."""
    m, n, k = shape
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device)
    w = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device)
    expected = (a.cpu().long() @ w.cpu().long().t()).to(torch.int32)
    plan = peer.Plan(m, n, k, CUBLASLT_WORKSPACE_BYTES, CUBLASLT_TOP_ALGOS)
    workspace = torch.empty(CUBLASLT_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    exact = plan.num_algos > 0
    for idx in range(plan.num_algos):
        d = torch.full((m, n), SENTINEL, dtype=torch.int32, device=device)
        plan.run(idx, a, w, d, workspace)
        exact = exact and torch.equal(d.cpu(), expected)
    flag = "" if exact else "   !!! NOT EXACT"
    print(f"cuBLASLt peer self-check {m}x{n}x{k} ({plan.num_algos} algos): exact={exact}{flag}")
    return exact


# ----------------------------------------------------------------------------- inputs


def count_sets(shape: Shape, device: torch.device) -> int:
    m, n, k = shape
    int8_bytes = (m + n) * k  # the bf16 and fp8 copies take 3x more: budget a quarter for int8
    return timing.input_sets(int8_bytes, device, budget_bytes=INPUT_BUDGET_BYTES // 4)


def make_input_sets(shape: Shape, n_sets: int, device: torch.device, peers: bool) -> InputSets:
    m, n, k = shape
    a = [torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device) for _ in range(n_sets)]
    w = [torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device) for _ in range(n_sets)]
    if not peers:
        return InputSets(a=a, w=w)
    a_bf16 = [x.to(torch.bfloat16) for x in a]
    w_bf16 = [x.to(torch.bfloat16) for x in w]
    return InputSets(
        a=a,
        w=w,
        a_bf16=a_bf16,
        w_bf16=w_bf16,
        a_fp8=[(x / 16).to(torch.float8_e4m3fn) for x in a_bf16],
        w_fp8=[(x / 16).to(torch.float8_e4m3fn) for x in w_bf16],
        scale_a=torch.ones(m, 1, dtype=torch.float32, device=device),
        scale_b=torch.ones(1, n, dtype=torch.float32, device=device),
    )


def reference(sets: InputSets) -> tuple[torch.Tensor, str]:
    """Exact int32 a[0] @ w[0].t(): _int_mm, else fp64 (exact: |sums| << 2**53)."""
    a, w = sets.a[0], sets.w[0]
    try:
        return torch._int_mm(a, w.t()), "_int_mm"
    except RuntimeError:
        return (a.double() @ w.double().t()).to(torch.int32), "fp64"


# ----------------------------------------------------------------------------- measuring


def is_exact(name: str, shape: Shape, out: torch.Tensor, ref: torch.Tensor) -> bool:
    if out.dtype == ref.dtype and out.shape == ref.shape and torch.equal(out, ref):
        return True
    if out.dtype != ref.dtype or out.shape != ref.shape:
        detail = f"got {out.dtype} {tuple(out.shape)}, want {ref.dtype} {tuple(ref.shape)}"
    else:
        detail = f"{int((out != ref).sum())} of {ref.numel()} elements differ"
    print(f"!!! INEXACT: {name} at M={shape[0]} N={shape[1]} K={shape[2]}: {detail}")
    return False


def short_error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def measure(name: str, fn: GemmFn, shape: Shape, sets: InputSets,
            ref: Optional[torch.Tensor], max_reps: int, device: torch.device) -> Result:
    """Probe once (unsupported shapes raise), check exactness if ref given, then time."""
    try:
        out = fn(0)
    except Exception as exc:  # unsupported shape/backend: record and move on
        return Result(error=short_error(exc))
    exact = None if ref is None else is_exact(name, shape, out, ref)
    del out
    return Result(ms=timing.median_ms(fn, len(sets), max_reps=max_reps, device=device), exact=exact)


def tcgemm_fn(tcgemm: ModuleType, backend: str, sets: InputSets) -> GemmFn:
    return lambda i: tcgemm.int8_gemm(sets.a[i], sets.w[i].t(), backend=backend)


def int_mm_fn(sets: InputSets) -> GemmFn:
    return lambda i: torch._int_mm(sets.a[i], sets.w[i].t())


def bf16_fn(sets: InputSets) -> GemmFn:
    return lambda i: torch.mm(sets.a_bf16[i], sets.w_bf16[i].t())


def fp8_fn(sets: InputSets) -> GemmFn:
    return lambda i: torch._scaled_mm(sets.a_fp8[i], sets.w_fp8[i].t(), scale_a=sets.scale_a,
                                      scale_b=sets.scale_b, out_dtype=torch.bfloat16)


def cublaslt_fn(plan: Any, algo: int, sets: InputSets, d: torch.Tensor,
                workspace: torch.Tensor) -> GemmFn:
    def run(i: int) -> torch.Tensor:
        plan.run(algo, sets.a[i], sets.w[i], d, workspace)
        return d

    return run


def bench_cublaslt(peer: Any, shape: Shape, sets: InputSets, ref: torch.Tensor,
                   workspace: torch.Tensor, max_reps: int,
                   device: torch.device) -> tuple[Result, list[dict[str, Any]]]:
    """Time each top heuristic algorithm; report the fastest (with its exact flag)."""
    m, n, k = shape
    try:
        plan = peer.Plan(m, n, k, CUBLASLT_WORKSPACE_BYTES, CUBLASLT_TOP_ALGOS)
    except RuntimeError as exc:
        return Result(error=short_error(exc)), []
    if plan.num_algos == 0:
        return Result(error="no cuBLASLt heuristic algorithm for this shape"), []
    per_algo: list[tuple[int, Result]] = []
    for idx in range(plan.num_algos):
        d = torch.full((m, n), SENTINEL, dtype=torch.int32, device=device)
        fn = cublaslt_fn(plan, idx, sets, d, workspace)
        per_algo.append((idx, measure(f"cublasLt[algo {idx}]", fn, shape, sets, ref, max_reps, device)))
    algos = [{"index": idx, "ms": r.ms, "tops": timing.tops(*shape, r.ms), "exact": r.exact,
              "error": r.error, "workspace_bytes": plan.algo_workspace(idx),
              "waves": plan.algo_waves(idx)} for idx, r in per_algo]
    timed = [(idx, r) for idx, r in per_algo if r.ms is not None]
    if not timed:
        return Result(error=per_algo[0][1].error), algos
    best_idx, best = min(timed, key=lambda item: item[1].ms)
    for entry in algos:
        entry["best"] = entry["index"] == best_idx
    return best, algos


def bench_shape(shape: Shape, tcgemm: Optional[ModuleType], backends: list[str], peers: bool,
                peer: Any, workspace: Optional[torch.Tensor], max_reps: int,
                device: torch.device) -> ShapeReport:
    sets = make_input_sets(shape, count_sets(shape, device), device, peers)
    ref, ref_name = reference(sets)
    report_ = ShapeReport(shape=shape, n_sets=len(sets), reference=ref_name)
    for backend in backends:
        if backend in FEW_ROWS_BACKENDS and shape[0] > FEW_ROWS_MAX_M:
            report_.results[backend] = Result(error=f"not timed above M = {FEW_ROWS_MAX_M}")
            continue
        report_.results[backend] = measure(backend, tcgemm_fn(tcgemm, backend, sets), shape,
                                           sets, ref, max_reps, device)
    if not peers:
        return report_
    if peer is None:
        report_.results["cublasLt"] = Result(error="cuBLASLt peer missing")
    else:
        report_.results["cublasLt"], report_.cublaslt_algos = bench_cublaslt(
            peer, shape, sets, ref, workspace, max_reps, device)
    int_mm_ref = None if ref_name == "_int_mm" else ref  # never checked against itself
    report_.results["_int_mm"] = measure("_int_mm", int_mm_fn(sets), shape, sets, int_mm_ref,
                                         max_reps, device)
    report_.results["bf16"] = measure("bf16", bf16_fn(sets), shape, sets, None, max_reps, device)
    report_.results["fp8"] = measure("fp8", fp8_fn(sets), shape, sets, None, max_reps, device)
    return report_


# ----------------------------------------------------------------------------- output


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    return None if num is None or not den else num / den


def series_of(record: dict[str, Any]) -> list[str]:
    """The record's tcgemm backends, then the peers it ran (all four in records of full runs)."""
    return list(record["backends"]) + [p for p in PEERS if p in record["tops"]]


def to_record(report_: ShapeReport, backends: list[str], sweeps: list[str],
              meta: dict[str, Any]) -> dict[str, Any]:
    shape = report_.shape
    series = backends + [p for p in PEERS if p in report_.results]
    tops_by = {s: timing.tops(*shape, report_.results[s].ms) for s in series}
    peer_tops = [tops_by[p] for p in INT8_PEERS if tops_by.get(p) is not None]
    best_peer = max(peer_tops, default=None)
    return {
        "M": shape[0], "N": shape[1], "K": shape[2],
        "sweeps": sweeps,
        "backends": backends,
        "tops": tops_by,
        "ms": {s: report_.results[s].ms for s in series},
        "exact": {s: report_.results[s].exact for s in series},
        "errors": {s: report_.results[s].error for s in series if report_.results[s].error},
        "reference": report_.reference,
        "n_input_sets": report_.n_sets,
        "best_int8_peer_tops": best_peer,
        "ratio_vs_best_int8_peer": {b: ratio(tops_by[b], best_peer) for b in backends},
        "ratio_vs_int_mm": {b: ratio(tops_by[b], tops_by.get("_int_mm")) for b in backends},
        "cublasLt_algos": report_.cublaslt_algos,
        **meta,
    }


def progress_line(index: int, total: int, record: dict[str, Any]) -> str:
    parts = []
    for name, value in record["tops"].items():
        exact = record["exact"][name]
        mark = "" if exact is None else (" exact" if exact else " INEXACT!")
        parts.append(f"{name}={'-' if value is None else f'{value:.1f}'}{mark}")
    head = f"[{index}/{total}] M={record['M']} N={record['N']} K={record['K']}"
    return f"{head} (sets={record['n_input_sets']}, ref={record['reference']}): " + ", ".join(parts)


def cell_tops(record: dict[str, Any], name: str) -> str:
    value = record["tops"].get(name)
    if value is None:
        return "-"
    return f"{value:.{1 if value >= 10 else 2}f}" + ("!" if record["exact"].get(name) is False else "")


def fastest_backend(record: dict[str, Any]) -> Optional[str]:
    timed = [(record["tops"][b], b) for b in record["backends"] if record["tops"].get(b) is not None]
    return max(timed)[1] if timed else None


def format_table(records: list[dict[str, Any]]) -> str:
    """The console table: TOPS per series and each backend's ratios to the int8 peers."""
    backends = list(records[0]["backends"])
    series = series_of(records[0])
    ratio_cols = [(b, kind) for b in backends for kind in ("peer", "imm") if "_int_mm" in series]
    headers = (["M", "N", "K"] + series
               + [f"{b}/{'best' if kind == 'peer' else '_int_mm'}" for b, kind in ratio_cols])
    widths = [max(6, len(h)) for h in headers[:3]] + [max(9, len(h)) for h in headers[3:]]

    def cell_ratio(rec: dict[str, Any], b: str, kind: str) -> str:
        value = (rec["ratio_vs_best_int8_peer"] if kind == "peer" else rec["ratio_vs_int_mm"])[b]
        return "-" if value is None else f"{value:.2f}x"

    def row(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths))

    lines = [
        "TOPS (int8: tera int-ops/s; bf16/fp8: TFLOP/s) = 2*M*N*K / median time. "
        "'-' = unsupported/missing, '!' = INEXACT result. best = max(cublasLt, _int_mm).",
        row(headers),
        row(["-" * w for w in widths]),
    ]
    for rec in records:
        cells = [str(rec["M"]), str(rec["N"]), str(rec["K"])]
        cells += [cell_tops(rec, s) for s in series]
        cells += [cell_ratio(rec, b, kind) for b, kind in ratio_cols]
        lines.append(row(cells))
    return "\n".join(lines)


def markdown_section(sweep: str, records: list[dict[str, Any]], command: Optional[str],
                     plot: Optional[str]) -> str:
    """One sweep's table with its heading, the line naming GPU, date and command, and a legend."""
    backends = list(records[0]["backends"])
    series = series_of(records[0])
    peers = [s for s in series if s in PEERS]
    int8_peers = [p for p in INT8_PEERS if p in peers]
    headers = ["M", "N", "K"] + [f"tcgemm {b}" for b in backends] + [PEER_TITLES[p] for p in peers]
    if int8_peers:
        headers += ["fastest tcgemm", "vs best int8 peer"]
    rows = []
    for rec in records:
        row = [str(rec["M"]), str(rec["N"]), str(rec["K"])] + [cell_tops(rec, s) for s in series]
        if int8_peers:
            best = fastest_backend(rec)
            value = rec["ratio_vs_best_int8_peer"].get(best) if best else None
            row += [best or "-", "-" if value is None else f"{value:.2f}x"]
        rows.append(row)
    legend = ("TOPS = `2*M*N*K` / median device time (int8: 10^12 integer operations/s; bf16, fp8: TFLOP/s), "
              "A [M,K] row-major times a [N,K] weight (the `nn.Linear` layout), random full-range int8; "
              "each tcgemm backend forced in turn. '-': not supported, or not timed; '!': result not exact.")
    if peers:
        legend += (" Peers in the same process: cuBLASLt (the best of its 4 heuristic algorithms, 32 MiB "
                   "workspace), `torch._int_mm`, bf16 `torch.mm`, fp8 e4m3 `torch._scaled_mm` (bf16 out).")
    if int8_peers:
        legend += (" The last columns: the fastest tcgemm backend at that shape, and its TOPS over the best of "
                   + " and ".join(PEER_TITLES[p] for p in int8_peers) + ".")
    parts = [f"## {SWEEP_TITLES[sweep]}", report.header_line(records[0], command), legend,
             report.markdown_table(headers, rows, align_left=0)]
    if plot:
        parts.append(f"![TOPS against M, one panel per (N, K)]({plot})")
    return "\n\n".join(parts)


def sweep_order(name: str, record: dict[str, Any]) -> tuple[int, ...]:
    """Where a record sits in its sweep's own order (a run times shared shapes once, first come)."""
    shape = (record["M"], record["N"], record["K"])
    if name == "mrange" and (shape[1], shape[2]) in MRANGE_NK:
        return MRANGE_NK.index((shape[1], shape[2])), shape[0]
    if name == "bars" and shape in BARS_SHAPES:
        return (BARS_SHAPES.index(shape),)
    if name == "quick" and shape in QUICK_SHAPES:
        return (QUICK_SHAPES.index(shape),)
    return (0,) if name == "custom" else shape


def write_markdown(path: Path, records: list[dict[str, Any]], sweep: str,
                   command: Optional[str], plot: Optional[Path]) -> None:
    sweeps = [s for s in SWEEPS if sweep in (s, "all")]
    sections = {}
    for name in sweeps:
        chosen = sorted((r for r in records if name in r["sweeps"]), key=lambda r: sweep_order(name, r))
        if not chosen:
            continue
        link = None
        if name == "mrange" and plot is not None and plot.exists():
            link = os.path.relpath(plot.resolve(), path.resolve().parent)
        sections[f"bench_gemm {name}"] = markdown_section(name, chosen, command, link)
    if not sections:
        print(f"no records of sweep {sweep!r}: {path} not written")
        return
    report.update_markdown(path, sections)


def write_plot(records: list[dict[str, Any]], path: Path) -> bool:
    """TOPS vs M (log2) per (N,K) of the M-range sweep, one subplot each."""
    groups = [(n, k, sorted((r for r in records if (r["N"], r["K"]) == (n, k) and "mrange" in r["sweeps"]),
                            key=lambda r: r["M"])) for n, k in MRANGE_NK]
    groups = [g for g in groups if len(g[2]) >= 2]
    if not groups:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: skipping the plot")
        return False
    series = series_of(groups[0][2][0])
    cols = min(3, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4.2 * rows), squeeze=False)
    colors = plt.get_cmap("tab10")  # one colour per series in every subplot
    for ax, (n, k, recs) in zip(axes.flat, groups):
        for i, s in enumerate(series):
            points = [(r["M"], r["tops"][s]) for r in recs if r["tops"].get(s) is not None]
            if points:
                # matplotlib hides legend labels that start with "_", hence "torch._int_mm"
                label = f"torch.{s}" if s == "_int_mm" else s if s in PEERS else f"tcgemm:{s}"
                ax.plot(*zip(*points), marker="o", markersize=3, color=colors(i % 10),
                        linestyle="--" if s in PEERS else "-", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"N={n}, K={k}")
        ax.set_xlabel("M")
        ax.set_ylabel("TOPS")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.suptitle(f"INT8 GEMM (TN) on {records[0]['device']}, torch {records[0]['torch']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
    return True


# ----------------------------------------------------------------------------- main


def render(args: argparse.Namespace) -> int:
    records = json.loads(args.render.read_text())
    if args.sweep != "all":
        records = [r for r in records if args.sweep in r["sweeps"]]
    if not records:
        print(f"{args.render}: no records of sweep {args.sweep!r}", file=sys.stderr)
        return 1
    if args.plot_given:
        write_plot(records, args.plot)
    print(format_table(records))
    if args.markdown:
        write_markdown(args.markdown, records, args.sweep, args.command,
                       args.plot if args.plot_given else None)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.render:
        return render(args)
    if not torch.cuda.is_available():
        print("a CUDA device is required", file=sys.stderr)
        return 1
    device = torch.device("cuda", torch.cuda.current_device())
    torch.manual_seed(0)
    tcgemm, backends = load_tcgemm(device, args.backends, args.include_simple)
    peers = not args.no_peers
    peer, peer_self_check = load_cublaslt_peer(device) if peers else (None, None)
    meta = report.run_metadata(device, report.command_line("benchmarks.bench_gemm", argv))
    meta["cublasLt_self_check_exact"] = peer_self_check
    shapes = select_shapes(args.sweep, args.custom)
    workspace = torch.empty(CUBLASLT_WORKSPACE_BYTES, dtype=torch.uint8, device=device) if peers else None
    print(f"{meta['device']}: {len(shapes)} shapes, tcgemm backends {backends}, "
          f"peers {'on' if peers else 'off'}, clocks {meta['clocks']}")

    records = []
    for index, (shape, sweeps) in enumerate(shapes.items(), start=1):
        result = bench_shape(shape, tcgemm, backends, peers, peer, workspace, args.reps, device)
        records.append(to_record(result, backends, sweeps, meta))
        print(progress_line(index, len(shapes), records[-1]), flush=True)
        torch.cuda.empty_cache()

    report.write_json(records, args.json)
    plotted = write_plot(records, args.plot)
    if args.markdown:
        write_markdown(args.markdown, records, args.sweep, None,
                       args.plot if plotted and args.plot_given else None)
    print()
    print(format_table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Decode-sized layers: QuantLinear against bf16 nn.Linear at a few rows, graphs and eager.

    python3 -m benchmarks.bench_decode [--quick] [--markdown docs/performance.md]

Each layer shape is timed as a decode step runs it: many different weights one after the other
(copies rotated so that their bytes exceed 3x the L2, as the layers of a model do), with the input
rows fixed. "graph": the calls are captured in one CUDA graph and replayed, the time per call is
the replay's device time over the calls; "eager": the same calls from Python, timed with events
around the whole loop, so that host time counts where it exceeds the kernels'. Methods take turns
in rounds (interleaved), the median over rounds is reported. Methods: bf16 ``F.linear``;
``QuantLinear`` (weight per channel, activations per token: the one op ``tcgemm.quant_linear``);
the same layer as two ops (``tcgemm.quantize`` then ``tcgemm.scaled_gemm``, the path before the
one op); ``QuantLinear(weight="block", activation="block")``. The weight stream rate is the int8
weight bytes over the per-call time. Host time per call is ``timing.host_us`` on a small layer.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
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
ROWS = (1, 4, 16)
PREFILL = [("8B up", 4096, 14336), ("8B down", 14336, 4096)]
# Static (calibrated per-tensor) against dynamic per-token activation scales.
STATIC = ("8B up", 4096, 14336)
STATIC_ROWS = (1, 16)
PREFILL_ROWS = 2048
METHODS = ("bf16", "quantlinear", "two_ops", "quantlinear_block")
TITLES = {"bf16": "bf16 us", "quantlinear": "QuantLinear us", "two_ops": "two ops us",
          "quantlinear_block": "QL block us"}
CALLS_MIN = 24  # calls per graph or eager loop
ROUNDS = 7


def make_methods(k: int, n: int, m: int, device) -> tuple[dict[str, Callable[[int], Any]], int, int]:
    """Per method a function of the weight copy index; the number of copies; int8 weight bytes."""
    import tcgemm

    n_sets = max(2, math.ceil(3 * timing.l2_bytes(device) / (n * k)))
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    bias = None
    w_bf16, layers, blocks = [], [], []
    for i in range(n_sets):
        lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
        w_bf16.append(lin.weight.detach())
        layers.append(tcgemm.QuantLinear.from_linear(lin))
        blocks.append(tcgemm.QuantLinear.from_linear(lin, weight="block", activation="block"))
        del lin

    def two_ops(i):
        layer = layers[i]
        q, s = tcgemm.quantize(x, "token")
        return tcgemm.scaled_gemm(q, layer.weight.t(), s, layer.weight_scale, bias, out_dtype=x.dtype)

    fns = {
        "bf16": lambda i: F.linear(x, w_bf16[i]),
        "quantlinear": lambda i: layers[i](x),
        "two_ops": two_ops,
        "quantlinear_block": lambda i: blocks[i](x),
    }
    return fns, n_sets, n * k


def _loop(fn: Callable[[int], Any], n_sets: int, calls: int) -> Callable[[], None]:
    def run():
        for c in range(calls):
            fn(c % n_sets)
    return run


def time_methods(fns: dict[str, Callable[[int], Any]], n_sets: int, graphs: bool) -> dict[str, float]:
    """Median over ROUNDS of the per-call time (us), methods interleaved within each round."""
    calls = max(CALLS_MIN, n_sets * math.ceil(CALLS_MIN / n_sets))
    runners = {}
    for name, fn in fns.items():
        loop = _loop(fn, n_sets, calls)
        if graphs:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                loop()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                loop()
            runners[name] = graph.replay
        else:
            runners[name] = loop
    for run in runners.values():  # warm-up
        run()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(ROUNDS):
        for name, run in runners.items():
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


def measure(name: str, k: int, n: int, m: int, make: Callable[[], tuple], methods: Optional[tuple] = None,
            eager: bool = True, text: Optional[Callable[[dict], str]] = None) -> dict[str, Any]:
    """One layer shape: the methods make() builds (their weight copies freed after), with graphs
    and (eager) without; the record, printed as it is measured."""
    fns, n_sets, weight_bytes = make()
    if methods is not None:
        fns = {key: fns[key] for key in methods}
    rec = {"layer": name, "k": k, "n": n, "m": m, "weight_bytes": weight_bytes,
           "graph": time_methods(fns, n_sets, graphs=True)}
    if eager:
        rec["eager"] = time_methods(fns, n_sets, graphs=False)
    print((text or row_text)(rec), flush=True)
    del fns
    torch.cuda.empty_cache()
    return rec


def static_text(rec: dict[str, Any]) -> str:
    return f"static vs token {rec['layer']} M={rec['m']}: graph {rec['graph']}, eager {rec['eager']}"


def run(args) -> dict[str, Any]:
    device = torch.device("cuda", torch.cuda.current_device())
    meta = report.run_metadata(device, report.command_line("benchmarks.bench_decode", args.argv))
    layers, rows = select_layers(args.layers, args.quick), args.rows or ((1, 16) if args.quick else ROWS)
    with torch.no_grad():
        records = [measure(name, k, n, m, lambda: make_methods(k, n, m, device))
                   for name, k, n in layers for m in rows]
        prefill = [measure(name, k, n, PREFILL_ROWS, lambda: make_methods(k, n, PREFILL_ROWS, device),
                           methods=("bf16", "quantlinear", "quantlinear_block"), eager=False)
                   for name, k, n in PREFILL]
        name, k, n = STATIC
        static = [measure(name, k, n, m, lambda: static_methods(k, n, m, device), text=static_text)
                  for m in STATIC_ROWS]
        host = host_times(device)
    print(f"host us/call: {host}")
    return {"meta": meta, "decode": records, "prefill": prefill, "static": static, "host_us": host}


def select_layers(names: Optional[str], quick: bool) -> list[tuple[str, int, int]]:
    """The decode layers to time: those named in a comma-separated list (spaces in a name may be
    written as '_', e.g. "8B_qkv,70B_o"), else the quick three or all of LAYERS."""
    if not names:
        return LAYERS[:2] + LAYERS[3:4] if quick else LAYERS
    by_name = {name.replace(" ", "_"): (name, k, n) for name, k, n in LAYERS}
    chosen = []
    for item in names.split(","):
        key = item.strip().replace(" ", "_")
        if key not in by_name:
            raise ValueError(f"bench_decode: --layers: unknown layer '{item}' (known: {', '.join(by_name)})")
        chosen.append(by_name[key])
    return chosen


def static_methods(k: int, n: int, m: int, device) -> tuple[dict[str, Callable[[int], Any]], int, int]:
    """QuantLinear with dynamic per-token and with static per-tensor activation scales; the number
    of copies; int8 weight bytes."""
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
    return {"token": lambda i: dynamic[i](x), "static": lambda i: static[i](x)}, n_sets, n * k


def ratio(a: Optional[float], b: Optional[float]) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def row_text(rec: dict[str, Any]) -> str:
    g = rec["graph"]
    parts = [f"{rec['layer']:>10s} M={rec['m']:<5d}"]
    parts += [f"{k}={v:7.1f}" for k, v in g.items()]
    parts.append(f"graph speed-up {ratio(g['bf16'], g['quantlinear'])}")
    if "eager" in rec:
        parts.append(f"eager {ratio(rec['eager']['bf16'], rec['eager']['quantlinear'])}")
    return "  ".join(parts)


def markdown(doc: dict[str, Any], command: Optional[str] = None) -> dict[str, str]:
    header = report.header_line(doc["meta"], command)
    rows = []
    for r in doc["decode"]:
        g, e = r["graph"], r["eager"]
        stream = r["weight_bytes"] / (g["quantlinear"] * 1e-6) / 1e12
        rows.append([r["layer"], f"{r['k']}->{r['n']}", str(r["m"]), f"{g['bf16']:.1f}", f"{g['quantlinear']:.1f}",
                     ratio(g["bf16"], g["quantlinear"]), f"{stream:.2f}", ratio(g["bf16"], g["two_ops"]),
                     ratio(g["bf16"], g["quantlinear_block"]), f"{e['bf16']:.1f}", f"{e['quantlinear']:.1f}",
                     ratio(e["bf16"], e["quantlinear"])])
    headers = ["layer", "K->N", "M", "graph bf16 us", "graph QuantLinear us", "speed-up", "int8 weight TB/s",
               "two ops speed-up", "block speed-up", "eager bf16 us", "eager QuantLinear us", "eager speed-up"]
    legend = ("Per call, a decode step's view: rotated weight copies (3x the L2), fixed input rows. graph: one CUDA "
              "graph of the calls, replayed; eager: the same calls from Python (host time included). QuantLinear: "
              "per-channel weight, per-token activations, one op (`tcgemm.quant_linear`: one kernel where x holds at "
              "most 8192 values, up to 4 rows; else quantize and GEMM as overlapped launches); two ops: `quantize` "
              "then `scaled_gemm`; block: 128x128 weight and 1x128 activation scales. Speed-ups are against bf16 "
              "`F.linear`, timed in the same process.")
    pre_rows = []
    for r in doc["prefill"]:
        g = r["graph"]
        pre_rows.append([r["layer"], f"{r['k']}->{r['n']}", str(r["m"]), f"{g['bf16']:.1f}", f"{g['quantlinear']:.1f}",
                         ratio(g["bf16"], g["quantlinear"]), ratio(g["bf16"], g["quantlinear_block"])])
    static_rows = [[r["layer"], f"{r['k']}->{r['n']}", str(r["m"]), f"{r['graph']['token']:.1f}",
                    f"{r['graph']['static']:.1f}", ratio(r["graph"]["token"], r["graph"]["static"]),
                    f"{r['eager']['token']:.1f}", f"{r['eager']['static']:.1f}",
                    ratio(r["eager"]["token"], r["eager"]["static"])] for r in doc.get("static", [])]
    host = doc["host_us"]
    host_line = (f"Host time per call, 256->256 layer at M = 1 (`timing.host_us`): nn.Linear {host['nn.Linear']:.1f} us, "
                 f"QuantLinear {host['QuantLinear']:.1f} us ({host['QuantLinear'] / host['nn.Linear']:.2f}x).")
    body = "\n\n".join([
        "## Decode: QuantLinear against bf16 at a few rows", header, legend,
        report.markdown_table(headers, rows, align_left=2),
        report.markdown_table(["layer", "K->N", "M", "bf16 us", "QuantLinear us", "speed-up", "block speed-up"],
                              pre_rows, align_left=2),
        host_line,
    ] + ([("Static (calibrated per-tensor, `activation=\"static\"`) against dynamic per-token activation "
           "scales, `QuantLinear`, same rotation; speed-up of static over dynamic:"),
          report.markdown_table(["layer", "K->N", "M", "graph token us", "graph static us", "static speed-up",
                                 "eager token us", "eager static us", "eager static speed-up"],
                                static_rows, align_left=2)] if static_rows else []))
    return {"bench_decode": body}


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.bench_decode", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="three layers at M = 1 and 16")
    p.add_argument("--layers", default=None, help="comma-separated decode layers, e.g. 8B_qkv,70B_o (default: all, "
                   "or the quick three)")
    p.add_argument("--rows", type=int, nargs="+", default=None, help="decode row counts (default: 1 4 16, quick 1 16)")
    report.add_result_args(p, "bench_decode")
    args = p.parse_args(argv)
    try:  # a bad selection fails here, before any GPU work
        select_layers(args.layers, args.quick)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

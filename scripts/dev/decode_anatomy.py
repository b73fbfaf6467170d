"""Where a decode-sized QuantLinear call spends its time (GPU): the parts timed alone, in graphs.

    python3 -m scripts.dev.decode_anatomy [--json PATH] [--host-only] [--scheme w4a8] [--rows 1 16]

Per layer shape and row count, in one CUDA graph of rotated weight copies (as bench_decode):
bf16 F.linear; tcgemm.quantize alone; scaled_gemm on pre-quantized rows per backend (each of
tcgemm.backends_for("scaled_gemm")); quant_linear (auto: both kernels, overlapped on sm_90). With
--scheme w4a8: the W4A8 layer (`QuantLinear(scheme="w4a8")`: at up to 4 rows of at most 8192
values one kernel, else tcgemm.quantize then the GEMM, overlapped), tcgemm.quantize alone, and
int4_gemm on the pre-quantized rows (the GEMM alone, int32 out, not overlapped). Then a graph of
tiny kernels (the per-kernel cost of a graph), and host time per call of each layer of the stack
(timing.host_us on a 256 x 256 layer).
"""

from __future__ import annotations

import argparse
import json
import math

import torch
import torch.nn.functional as F

import tcgemm
from benchmarks import timing
from benchmarks.bench_decode import time_methods

SHAPES = [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096), (8192, 8192)]


def layer_fns(k, n, m, device):
    n_sets = max(2, math.ceil(3 * timing.l2_bytes(device) / (n * k)))
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    q, s = tcgemm.quantize(x, "token")
    ws, qs, scales = [], [], []
    for _ in range(n_sets):
        w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        qw, sw = tcgemm.nn.quantize_weight(w, "channel")
        ws.append(w), qs.append(qw), scales.append(sw)
    fns = {
        "bf16": lambda i: F.linear(x, ws[i]),
        "quantize": lambda i: tcgemm.quantize(x, "token"),
        "quant_linear": lambda i: torch.ops.tcgemm.quant_linear.default(x, qs[i], scales[i], activation="token"),
    }
    for backend in tcgemm.backends_for("scaled_gemm", device=device):
        fns[f"gemm_{backend}"] = (lambda b: lambda i: tcgemm.scaled_gemm(q, qs[i].t(), s, scales[i], None,
                                                                           torch.bfloat16, backend=b))(backend)
    return fns, n_sets


def w4a8_layer_fns(k, n, m, device):
    n_sets = timing.input_sets(n * k // 2, device)
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    q, _ = tcgemm.quantize(x, "token")
    layers = []
    for _ in range(n_sets):
        lin = torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16)
        layers.append(tcgemm.QuantLinear.from_linear(lin, scheme="w4a8"))
        del lin
    fns = {
        "layer": lambda i: layers[i](x),
        "quantize": lambda i: tcgemm.quantize(x, "token"),
        "int4_gemm": lambda i: tcgemm.int4_gemm(q, layers[i].weight, layers[i].weight_group_scale),
    }
    return fns, n_sets


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    p.add_argument("--host-only", action="store_true", help="only the host times and profiles")
    p.add_argument("--scheme", choices=("w8a8", "w4a8"), default="w8a8", help="the layers' weights (default w8a8)")
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 8, 16])
    args = p.parse_args()
    make_fns = w4a8_layer_fns if args.scheme == "w4a8" else layer_fns
    device = torch.device("cuda")
    out = {"graph_us": [], "host_us": {}}
    with torch.no_grad():
        for k, n in [] if args.host_only else SHAPES:
            for m in args.rows:
                fns, n_sets = make_fns(k, n, m, device)
                t = time_methods(fns, n_sets, graphs=True)
                out["graph_us"].append({"k": k, "n": n, "m": m, **t})
                print(f"{k:>6d}->{n:<6d} M={m:<3d} " + "  ".join(f"{a}={b:6.1f}" for a, b in t.items()), flush=True)
                del fns
                torch.cuda.empty_cache()
        one = torch.zeros(1, device=device)
        tiny = time_methods({"tiny_kernel": lambda i: one.add_(1)}, 1, graphs=True)
        print(f"graph, per tiny kernel: {tiny['tiny_kernel']:.2f} us")
        out["tiny_kernel_graph_us"] = tiny["tiny_kernel"]
        lin = torch.nn.Linear(256, 256, device=device, dtype=torch.bfloat16)
        qlin = tcgemm.QuantLinear.from_linear(lin)
        x = torch.randn(1, 256, device=device, dtype=torch.bfloat16)
        q, s = tcgemm.quantize(x, "token")
        wt = qlin.weight.t()
        wt_bf16 = lin.weight.t()
        x3 = x.reshape(1, 1, 256)
        cases = {
            "add_ (one tiny kernel)": lambda: one.add_(1),
            "F.linear": lambda: F.linear(x, lin.weight, lin.bias),
            "nn.Linear": lambda: lin(x),
            "op quantize": lambda: torch.ops.tcgemm.quantize.default(x, "token", None, None),
            "op scaled_gemm": lambda: torch.ops.tcgemm.scaled_gemm.default(q, wt, s, qlin.weight_scale, qlin.bias,
                                                                           torch.bfloat16, "auto"),
            "op quant_linear": lambda: torch.ops.tcgemm.quant_linear.default(
                x, qlin.weight, qlin.weight_scale, qlin.bias, "token", None, None, "auto"),
            "tcgemm.quant_linear": lambda: tcgemm.quant_linear(x, qlin.weight, qlin.weight_scale, qlin.bias),
            "QuantLinear": lambda: qlin(x),
            "QuantLinear [1, 1, K]": lambda: qlin(x3),
            # The parts: the torch.ops call path against a native binding, allocations, a view.
            "torch.mm": lambda: torch.mm(x, lin.weight.t()),
            "op aten.mm": lambda: torch.ops.aten.mm.default(x, wt_bf16),
            "3 x torch.empty": lambda: (torch.empty(1, 256, dtype=torch.int8, device=device),
                                        torch.empty(1, 1, device=device), torch.empty(1, 256, device=device)),
            "weight.t()": lambda: qlin.weight.t(),
        }
        best = {}
        for _ in range(3):
            for name, fn in cases.items():
                best[name] = min(best.get(name, math.inf), timing.host_us(fn))
        for name, v in best.items():
            print(f"host {name:24s} {v:6.2f} us")
        out["host_us"] = best
        # Where a QuantLinear call's host time goes: ATen calls inside the op and the CUDA runtime.
        from torch.profiler import ProfilerActivity, profile

        for name in ("QuantLinear", "F.linear"):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(200):
                    cases[name]()
                torch.cuda.synchronize()
            print(f"profile of 200 calls of {name}:")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

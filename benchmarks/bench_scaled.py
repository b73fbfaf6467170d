"""Benchmark of the scaled (W8A8) path: tcgemm.scaled_gemm and QuantLinear against their peers.

    python3 benchmarks/bench_scaled.py [--quick] [--json PATH]

Per shape (activations x [M, K] bf16, weight [N, K]), all in the same run, TOPS = 2*M*N*K / time:
  int8_gemm      tcgemm.int8_gemm(qx, qw.t()) -> exact int32 (the GEMM alone)
  scaled_chan    tcgemm.scaled_gemm, per-token x per-channel scales + bias, bf16 out
  scaled_block   tcgemm.scaled_gemm, per-block 1x128 x 128x128 scales + bias, bf16 out
  fused_e2e      tcgemm.quantize(x) + scaled_chan: what QuantLinear runs
  fp8_rowwise    torch._scaled_mm, fp8 e4m3 with row-wise scales (+ bias), bf16 out
  unfused        the usual pipeline: quantize in PyTorch -> torch._int_mm -> dequantize (+ bias)
  bf16           torch.mm on bf16
Then QuantLinear (activation quantization included) against bf16 nn.Linear on the Llama-3-8B
MLP shapes at M = 2048. Device-event timing, warm-up, median, rotated input sets
(benchmarks/bench_gemm.py); methods interleaved in rounds (ROUNDS). A table is printed last; --json writes the records.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Callable, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gemm import count_sets, l2_bytes, median_ms, run_metadata  # noqa: E402

import tcgemm  # noqa: E402

BAR_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (2048, 28672, 8192)]
EXTRA_SHAPES = [(2048, 4096, 14336), (512, 8192, 8192), (128, 8192, 8192), (16, 4096, 4096)]
MLP_SHAPES = [(2048, 14336, 4096), (2048, 4096, 14336)]  # (M, out_features, in_features)
MAX_REPS = 200
# Methods are timed in rounds, in a rotated order each round, and each takes the median of its
# round medians: clocks drift with the card's power and heat over a run (H200: the same two
# kernels timed one after the other gave scaled/int8 ratios up to 10% lower than interleaved,
# benchmarks/NOTES-scaled.md step 9).
ROUNDS = 3


def unfused_pipeline(x, w_q, w_scale, bias):
    """quantize (PyTorch ops) -> torch._int_mm -> dequantize: what most int8 libraries run."""
    sx = x.abs().amax(dim=1, keepdim=True).float().clamp_min(1e-12) / 127
    qx = torch.round(x.float() / sx).clamp_(-127, 127).to(torch.int8)
    acc = torch._int_mm(qx, w_q.t())
    return (acc.float() * sx * w_scale.reshape(1, -1) + bias).to(torch.bfloat16)


def make_sets(m, n, k, n_sets, device):
    sets = []
    kb, nb = -(-k // 128), -(-n // 128)
    for _ in range(n_sets):
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=device) * 0.02
        qw, sw = tcgemm.quantize(w, "token")  # per output channel
        qx, sx = tcgemm.quantize(x, "token")
        qxb, sxb = tcgemm.quantize(x, "group")
        swb = (w.abs().reshape(n, kb, 128).amax(dim=2).reshape(nb, 128, kb).amax(dim=1) / 127) if n % 128 == 0 and k % 128 == 0 else torch.rand(nb, kb, device=device)
        bias = torch.randn(n, device=device) * 0.1
        s = {
            "x": x, "qx": qx, "sx": sx, "qxb": qxb, "sxb": sxb, "qw": qw, "sw": sw.reshape(-1), "swb": swb.float(),
            "bias": bias, "bias_bf16": bias.to(torch.bfloat16), "w_bf16": w.to(torch.bfloat16),
        }
        amax_x = x.abs().amax(dim=1, keepdim=True).float()
        amax_w = w.abs().amax(dim=1, keepdim=True).float()
        s["fx"] = (x.float() / (amax_x / 448)).to(torch.float8_e4m3fn)
        s["fw"] = (w / (amax_w / 448)).to(torch.float8_e4m3fn)
        s["fsx"], s["fsw"] = amax_x / 448, (amax_w / 448).reshape(1, -1)
        sets.append(s)
    return sets


def methods(sets) -> dict[str, Callable[[int], object]]:
    S = sets
    fp8_bias = {"bias": S[0]["bias_bf16"]}

    def fp8(i):
        s = S[i]
        return torch._scaled_mm(s["fx"], s["fw"].t(), scale_a=s["fsx"], scale_b=s["fsw"], out_dtype=torch.bfloat16,
                                **fp8_bias)

    try:
        fp8(0)
    except RuntimeError:  # row-wise scales with a bias are not supported by every torch build
        fp8_bias.clear()
    return {
        "int8_gemm": lambda i: tcgemm.int8_gemm(S[i]["qx"], S[i]["qw"].t()),
        "scaled_chan": lambda i: tcgemm.scaled_gemm(S[i]["qx"], S[i]["qw"].t(), S[i]["sx"], S[i]["sw"], S[i]["bias"]),
        "scaled_block": lambda i: tcgemm.scaled_gemm(S[i]["qxb"], S[i]["qw"].t(), S[i]["sxb"], S[i]["swb"], S[i]["bias"]),
        "fused_e2e": lambda i: _fused(S[i]),
        "fp8_rowwise": fp8,
        "unfused": lambda i: unfused_pipeline(S[i]["x"], S[i]["qw"], S[i]["sw"], S[i]["bias"]),
        "bf16": lambda i: torch.mm(S[i]["x"], S[i]["w_bf16"].t()),
    }


def _fused(s):
    qx, sx = tcgemm.quantize(s["x"], "token")
    return tcgemm.scaled_gemm(qx, s["qw"].t(), sx, s["sw"], s["bias"])


def check_accuracy(s) -> dict[str, float]:
    """Relative error of the fused outputs against fp32 math on the same quantized values."""
    ref = (s["qx"].float() @ s["qw"].float().t()) * s["sx"] * s["sw"].reshape(1, -1) + s["bias"]
    out = tcgemm.scaled_gemm(s["qx"], s["qw"].t(), s["sx"], s["sw"], s["bias"]).float()
    chan = float((out - ref).abs().max() / ref.abs().max())
    return {"scaled_chan_max_rel_err": chan}


def bench_shape(shape, device) -> dict:
    m, n, k = shape
    n_sets = max(2, min(count_sets(shape, l2_bytes(device)) // 2, 8))
    sets = make_sets(m, n, k, n_sets, device)
    rec = {"shape": list(shape), "n_sets": n_sets, "tops": {}, "errors": {}}
    rec.update(check_accuracy(sets[0]))
    fns = methods(sets)
    round_ms: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(ROUNDS):
        names = list(fns)
        for name in names[r % len(names):] + names[:r % len(names)]:  # a rotated order per round
            if name in rec["errors"]:
                continue
            try:
                round_ms[name].append(median_ms(fns[name], n_sets, MAX_REPS // ROUNDS, device))
            except Exception as exc:  # a peer missing on this build must not stop the run
                rec["errors"][name] = str(exc).splitlines()[0][:120]
    for name, times in round_ms.items():
        if times and name not in rec["errors"]:
            rec["tops"][name] = 2 * m * n * k / (statistics.median(times) * 1e-3) / 1e12
    del sets
    torch.cuda.empty_cache()
    return rec


def bench_mlp(m, n, k, device) -> dict:
    n_sets = 4
    linears = [torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    quant = [tcgemm.QuantLinear.from_linear(lin) for lin in linears]
    xs = [torch.randn(m, k, device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    with torch.no_grad():
        ref, got = linears[0](xs[0]).float(), quant[0](xs[0]).float()
        sqnr = float(10 * torch.log10(ref.pow(2).sum() / (ref - got).pow(2).sum()))
        fns = {"bf16": lambda i: linears[i](xs[i]), "quant": lambda i: quant[i](xs[i])}
        times: dict[str, list[float]] = {name: [] for name in fns}
        for r in range(ROUNDS):
            # Alternate which goes first, as bench_shape rotates its methods: a burst timed right
            # after the other one's runs on the clocks that burst left.
            for name in (["bf16", "quant"] if r % 2 == 0 else ["quant", "bf16"]):
                times[name].append(median_ms(fns[name], n_sets, MAX_REPS // ROUNDS, device))
        t_bf16, t_q = statistics.median(times["bf16"]), statistics.median(times["quant"])
    flops = 2 * m * n * k
    return {"mlp": [m, n, k], "bf16_tops": flops / t_bf16 / 1e9, "quantlinear_tops": flops / t_q / 1e9,
            "speedup": t_bf16 / t_q, "sqnr_db": sqnr}


def fmt(v: Optional[float], width=8) -> str:
    return f"{v:{width}.0f}" if v is not None else " " * (width - 1) + "-"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the bar shapes only")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_scaled: needs a CUDA GPU")
        return 1
    device = torch.device("cuda", torch.cuda.current_device())
    shapes = BAR_SHAPES + ([] if args.quick else EXTRA_SHAPES)
    records = []
    for shape in shapes:
        rec = bench_shape(shape, device)
        records.append(rec)
        print("done", shape, {k: round(v) for k, v in rec["tops"].items()}, rec["errors"] or "", flush=True)
    mlp = [bench_mlp(*s, device) for s in MLP_SHAPES]

    names = ["int8_gemm", "scaled_chan", "scaled_block", "fused_e2e", "fp8_rowwise", "unfused", "bf16"]
    print()
    print(f"scaled GEMM on {torch.cuda.get_device_name(device)}, TOPS (bf16 out, bias), and ratios of scaled_chan")
    print(f"{'M':>6}{'N':>7}{'K':>7} " + "".join(f"{n[:11]:>12}" for n in names)
          + "   /fp8  /int8 /unfused e2e/unf block/chan")
    for r in records:
        t = r["tops"]
        row = f"{r['shape'][0]:>6}{r['shape'][1]:>7}{r['shape'][2]:>7} " + "".join(f"{fmt(t.get(n), 12)}" for n in names)
        def ratio(a, b):
            return f"{t[a] / t[b]:6.2f}" if a in t and b in t else "     -"
        row += "  " + " ".join([ratio("scaled_chan", "fp8_rowwise"), ratio("scaled_chan", "int8_gemm"),
                               ratio("scaled_chan", "unfused"), ratio("fused_e2e", "unfused"),
                               ratio("scaled_block", "scaled_chan")])
        print(row)
    print()
    print("QuantLinear (activation quantization included) vs bf16 nn.Linear, Llama-3-8B MLP, M=2048")
    for r in mlp:
        m, n, k = r["mlp"]
        print(f"  {k:>5} -> {n:<5}  bf16 {r['bf16_tops']:6.0f} TOPS   QuantLinear {r['quantlinear_tops']:6.0f} TOPS"
              f"   speedup {r['speedup']:.2f}x   SQNR {r['sqnr_db']:.1f} dB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": run_metadata(device, tcgemm), "shapes": records, "mlp": mlp}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the scaled (W8A8) path: tcgemm.scaled_gemm and QuantLinear against their peers.

    python3 -m benchmarks.bench_scaled [--quick] [--no-peers] [--markdown FILE] [--json PATH]
    python3 -m benchmarks.bench_scaled --render RESULTS.json --markdown FILE    (no GPU needed)

Per shape (activations x [M, K] bf16, weight [N, K]), all in the same process, TOPS = 2*M*N*K / time:
  int8_gemm      tcgemm.int8_gemm(qx, qw.t()) -> exact int32 (the GEMM alone)
  scaled_chan    tcgemm.scaled_gemm, per-token x per-channel scales + bias, bf16 out
  scaled_block   tcgemm.scaled_gemm, per-block 1x128 x 128x128 scales + bias, bf16 out
  fused_e2e      tcgemm.quantize(x) + scaled_chan: what QuantLinear runs
  fp8_rowwise    torch._scaled_mm, fp8 e4m3 with row-wise scales (+ bias), bf16 out      (peer)
  fp8_block      torch._scaled_mm, fp8 e4m3 with 1x128 x 128x128 block scales, bf16 out   (peer)
  unfused        quantize in PyTorch -> torch._int_mm -> dequantize (+ bias)             (peer)
  bf16           torch.mm on bf16                                                         (peer)
Then QuantLinear (activation quantization included) against bf16 nn.Linear on the Llama-3-8B
MLP shapes at M = 2048: per channel with symmetric and asymmetric (zero point) activations, and
per block (128x128 weight blocks, 1x128 activation groups). Timing is benchmarks/timing.py: rotated input sets, device events,
warm-up, median, the methods interleaved in rotated rounds. A table is printed last; the records
go to benchmarks/results/bench_scaled.json (--json), the tables to a markdown file (--markdown).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from benchmarks import report, timing

BAR_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (2048, 28672, 8192)]
EXTRA_SHAPES = [(2048, 4096, 14336), (512, 8192, 8192), (128, 8192, 8192), (16, 4096, 4096)]
MLP_SHAPES = [(2048, 14336, 4096), (2048, 4096, 14336)]  # (M, out_features, in_features)
MAX_REPS = 200  # over all rounds
MAX_SETS = 8
METHODS = ("int8_gemm", "scaled_chan", "scaled_block", "fused_e2e", "fp8_rowwise", "fp8_block", "unfused", "bf16")
PEERS = ("fp8_rowwise", "fp8_block", "unfused", "bf16")
TITLES = {
    "int8_gemm": "int8_gemm (int32)", "scaled_chan": "per-channel", "scaled_block": "per-block",
    "fused_e2e": "quantize + per-channel", "fp8_rowwise": "fp8 row-wise", "fp8_block": "fp8 block-scaled",
    "unfused": "unfused int8",
    "bf16": "bf16",
}
# (numerator, denominator, column title) of the ratio columns
RATIOS = (
    ("scaled_chan", "fp8_rowwise", "per-channel / fp8"),
    ("scaled_chan", "int8_gemm", "per-channel / int8_gemm"),
    ("scaled_chan", "unfused", "per-channel / unfused"),
    ("fused_e2e", "unfused", "quantize + per-channel / unfused"),
    ("scaled_block", "scaled_chan", "per-block / per-channel"),
    ("scaled_block", "fp8_block", "per-block / fp8 block-scaled"),
)
TABLES = ("shapes", "mlp")


def unfused_pipeline(x, w_q, w_scale, bias):
    """quantize (PyTorch ops) -> torch._int_mm -> dequantize: what most int8 libraries run."""
    sx = x.abs().amax(dim=1, keepdim=True).float().clamp_min(1e-12) / 127
    qx = torch.round(x.float() / sx).clamp_(-127, 127).to(torch.int8)
    acc = torch._int_mm(qx, w_q.t())
    return (acc.float() * sx * w_scale.reshape(1, -1) + bias).to(torch.bfloat16)


def make_sets(m, n, k, n_sets, device):
    import tcgemm

    sets = []
    kb, nb = -(-k // 128), -(-n // 128)
    for _ in range(n_sets):
        x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=device) * 0.02
        qw, sw = tcgemm.quantize(w, "token")  # per output channel
        qx, sx = tcgemm.quantize(x, "token")
        qxb, sxb = tcgemm.quantize(x, "group")
        if n % 128 == 0 and k % 128 == 0:
            swb = w.abs().reshape(n, kb, 128).amax(dim=2).reshape(nb, 128, kb).amax(dim=1) / 127
        else:
            swb = torch.rand(nb, kb, device=device)
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
        if n % 128 == 0 and k % 128 == 0:
            s.update(fp8_block_operands(x, w))
        sets.append(s)
    return sets


def fp8_block_operands(x, w) -> dict:
    """x and w in fp8 e4m3 with the DeepSeek-V3 recipe's scales, laid out as torch._scaled_mm's
    block-wise mode takes them: x per 1x128 group ([M, K/128], outer-dim-major), w per 128x128
    block (given as [K/128, N/128] for the [K, N] operand)."""
    m, k = x.shape
    n = w.shape[0]
    kb, nb = k // 128, n // 128
    xg = x.float().reshape(m, kb, 128)
    sx = xg.abs().amax(dim=2).clamp_min(1e-12) / 448
    wg = w.float().reshape(nb, 128, kb, 128)
    sw = wg.abs().amax(dim=(1, 3)).clamp_min(1e-12) / 448
    return {
        "fxb": (xg / sx.unsqueeze(2)).reshape(m, k).to(torch.float8_e4m3fn),
        "fsxb": sx.t().contiguous().t(),
        "fwb": (wg / sw[:, None, :, None]).reshape(n, k).to(torch.float8_e4m3fn),
        "fswb": sw.t(),
    }


def methods(sets, peers: bool = True) -> dict[str, Callable[[int], object]]:
    import tcgemm

    S = sets
    fns = {
        "int8_gemm": lambda i: tcgemm.int8_gemm(S[i]["qx"], S[i]["qw"].t()),
        "scaled_chan": lambda i: tcgemm.scaled_gemm(S[i]["qx"], S[i]["qw"].t(), S[i]["sx"], S[i]["sw"], S[i]["bias"]),
        "scaled_block": lambda i: tcgemm.scaled_gemm(S[i]["qxb"], S[i]["qw"].t(), S[i]["sxb"], S[i]["swb"],
                                                     S[i]["bias"]),
        "fused_e2e": lambda i: _fused(S[i]),
    }
    if not peers:
        return fns
    fp8_bias = {"bias": S[0]["bias_bf16"]}

    def fp8(i):
        s = S[i]
        return torch._scaled_mm(s["fx"], s["fw"].t(), scale_a=s["fsx"], scale_b=s["fsw"], out_dtype=torch.bfloat16,
                                **fp8_bias)

    try:
        fp8(0)
    except RuntimeError:  # row-wise scales with a bias are not supported by every torch build
        fp8_bias.clear()
    fns["fp8_rowwise"] = fp8
    if "fxb" in S[0]:
        def fp8_block(i):
            s = S[i]
            return torch._scaled_mm(s["fxb"], s["fwb"].t(), scale_a=s["fsxb"], scale_b=s["fswb"],
                                    out_dtype=torch.bfloat16)

        fns["fp8_block"] = fp8_block
    fns["unfused"] = lambda i: unfused_pipeline(S[i]["x"], S[i]["qw"], S[i]["sw"], S[i]["bias"])
    fns["bf16"] = lambda i: torch.mm(S[i]["x"], S[i]["w_bf16"].t())
    return fns


def _fused(s):
    import tcgemm

    qx, sx = tcgemm.quantize(s["x"], "token")
    return tcgemm.scaled_gemm(qx, s["qw"].t(), sx, s["sw"], s["bias"])


def check_accuracy(s) -> dict[str, float]:
    """Relative error of the fused outputs against fp32 math on the same quantized values."""
    import tcgemm

    ref = (s["qx"].float() @ s["qw"].float().t()) * s["sx"] * s["sw"].reshape(1, -1) + s["bias"]
    out = tcgemm.scaled_gemm(s["qx"], s["qw"].t(), s["sx"], s["sw"], s["bias"]).float()
    chan = float((out - ref).abs().max() / ref.abs().max())
    return {"scaled_chan_max_rel_err": chan}


def bench_shape(shape, peers: bool, device) -> dict:
    m, n, k = shape
    n_sets = max(2, min(timing.input_sets((m + n) * k, device) // 2, MAX_SETS))
    sets = make_sets(m, n, k, n_sets, device)
    rec = {"shape": list(shape), "n_sets": n_sets, "tops": {}, "errors": {}}
    rec.update(check_accuracy(sets[0]))
    errors: dict[str, str] = {}  # a peer missing on this build must not stop the run
    ms = timing.interleaved_ms(methods(sets, peers), n_sets, max_reps=MAX_REPS, device=device, errors=errors)
    rec["tops"] = {name: timing.tops(m, n, k, t) for name, t in ms.items()}
    rec["errors"] = errors
    del sets
    torch.cuda.empty_cache()
    return rec


def bench_mlp(m, n, k, peers: bool, device) -> dict:
    import tcgemm

    n_sets = 4
    linears = [torch.nn.Linear(k, n, bias=False, device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    quant = [tcgemm.QuantLinear.from_linear(lin) for lin in linears]
    asym = [tcgemm.QuantLinear.from_linear(lin, asymmetric=True) for lin in linears]
    block = [tcgemm.QuantLinear.from_linear(lin, weight="block", activation="block") for lin in linears]
    xs = [torch.randn(m, k, device=device, dtype=torch.bfloat16) for _ in range(n_sets)]
    with torch.no_grad():
        ref = linears[0](xs[0]).float()

        def sqnr_db(layer):
            got = layer(xs[0]).float()
            return float(10 * torch.log10(ref.pow(2).sum() / (ref - got).pow(2).sum()))

        sqnr, block_sqnr = sqnr_db(quant[0]), sqnr_db(block[0])
        fns = {"bf16": lambda i: linears[i](xs[i]), "quant": lambda i: quant[i](xs[i]),
               "asym": lambda i: asym[i](xs[i]), "block": lambda i: block[i](xs[i])}
        if not peers:
            del fns["bf16"]
        ms = timing.interleaved_ms(fns, n_sets, max_reps=MAX_REPS, device=device)
    bf16_tops = timing.tops(m, n, k, ms.get("bf16"))
    q_tops = timing.tops(m, n, k, ms["quant"])
    return {"mlp": [m, n, k], "bf16_tops": bf16_tops, "quantlinear_tops": q_tops,
            "speedup": None if bf16_tops is None else q_tops / bf16_tops, "sqnr_db": sqnr,
            "asym_tops": timing.tops(m, n, k, ms["asym"]), "asym_time_ratio": ms["asym"] / ms["quant"],
            "block_tops": timing.tops(m, n, k, ms["block"]), "block_sqnr_db": block_sqnr,
            "block_speedup": None if bf16_tops is None else timing.tops(m, n, k, ms["block"]) / bf16_tops}


# ----------------------------------------------------------------------------- output


def fmt(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def ratio_cells(tops: dict[str, float]) -> list[str]:
    return [f"{tops[a] / tops[b]:.2f}x" if tops.get(a) and tops.get(b) else "-" for a, b, _ in RATIOS]


def format_table(doc: dict[str, Any]) -> str:
    records, mlp = doc["shapes"], doc["mlp"]
    meta = doc["meta"]
    lines = [f"scaled GEMM on {meta.get('device')}, TOPS (bf16 out, bias), and ratios of scaled_chan",
             f"{'M':>6}{'N':>7}{'K':>7} " + "".join(f"{n[:11]:>12}" for n in METHODS)
             + "   /fp8  /int8 /unfused e2e/unf block/chan block/fp8b"]
    for r in records:
        t = r["tops"]
        m, n, k = r["shape"]
        row = f"{m:>6}{n:>7}{k:>7} " + "".join(f"{fmt(t.get(name)):>12}" for name in METHODS)
        lines.append(row + "  " + " ".join(f"{c:>6}" for c in ratio_cells(t)))
    lines += ["", "QuantLinear (activation quantization included) vs bf16 nn.Linear, Llama-3-8B MLP, M=2048"]
    for r in mlp:
        m, n, k = r["mlp"]
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        asym = "" if "asym_tops" not in r else (f"   asymmetric {fmt(r['asym_tops']):>6} TOPS "
                                                f"(time {r['asym_time_ratio']:.3f}x symmetric)")
        lines.append(f"  {k:>5} -> {n:<5}  bf16 {fmt(r['bf16_tops']):>6} TOPS   QuantLinear "
                     f"{fmt(r['quantlinear_tops']):>6} TOPS   speedup {speedup}   SQNR {r['sqnr_db']:.1f} dB{asym}")
        if "block_tops" in r:
            bs = "-" if r["block_speedup"] is None else f"{r['block_speedup']:.2f}x"
            lines.append(f"  {'':>5}    {'':<5}  per-block QuantLinear {fmt(r['block_tops']):>6} TOPS   speedup {bs}"
                         f"   SQNR {r['block_sqnr_db']:.1f} dB")
    return "\n".join(lines)


def is_quick(doc: dict[str, Any]) -> bool:
    if "quick" in doc["meta"]:
        return bool(doc["meta"]["quick"])
    return all(tuple(r["shape"]) in BAR_SHAPES for r in doc["shapes"])


def markdown_sections(doc: dict[str, Any], tables: str, command: Optional[str]) -> dict[str, str]:
    meta = doc["meta"]
    header = report.header_line(meta, command)
    sections = {}
    if tables in ("shapes", "all") and doc["shapes"]:
        names = [n for n in METHODS if any(n in r["tops"] for r in doc["shapes"])]
        ratios = [i for i, (a, b, _) in enumerate(RATIOS) if a in names and b in names]
        headers = ["M", "N", "K"] + [TITLES[n] for n in names] + [RATIOS[i][2] for i in ratios]
        rows = []
        for r in doc["shapes"]:
            cells = ratio_cells(r["tops"])
            rows.append([str(v) for v in r["shape"]] + [fmt(r["tops"].get(n)) for n in names]
                        + [cells[i] for i in ratios])
        legend = ("TOPS = `2*M*N*K` / median device time. Activations [M, K] bf16 (Gaussian), weight [N, K] "
                  "quantized per output channel, bias, bf16 out. per-channel: `scaled_gemm` with per-token x "
                  "per-channel scales; per-block: 1x128 activation x 128x128 weight scales; "
                  "quantize + per-channel: `quantize(x)` then `scaled_gemm` (what `QuantLinear` runs); "
                  "int8_gemm: the same GEMM with an int32 result.")
        if any(p in names for p in PEERS):
            legend += (" Peers in the same process: fp8 e4m3 `torch._scaled_mm` with row-wise scales (+ bias), and "
                       "with 1x128 x 128x128 block scales (no bias: its block-wise mode takes none); unfused "
                       "int8: quantize in PyTorch, `torch._int_mm`, dequantize; bf16 `torch.mm`.")
        key = "bench_scaled quick" if is_quick(doc) else "bench_scaled shapes"
        title = "## Scaled GEMM (W8A8)" + (", quick sweep" if is_quick(doc) else "")
        sections[key] = "\n\n".join([title, header, legend, report.markdown_table(headers, rows)])
    if tables in ("mlp", "all") and doc["mlp"]:
        rows = []
        for r in doc["mlp"]:
            m, n, k = r["mlp"]
            speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
            asym = [fmt(r.get("asym_tops")), "-" if "asym_time_ratio" not in r else f"{r['asym_time_ratio']:.3f}x"]
            block = [fmt(r.get("block_tops")),
                     "-" if r.get("block_speedup") is None else f"{r['block_speedup']:.2f}x",
                     "-" if "block_sqnr_db" not in r else f"{r['block_sqnr_db']:.1f}"]
            rows.append([str(m), str(k), str(n), fmt(r["bf16_tops"]), fmt(r["quantlinear_tops"]), speedup,
                         f"{r['sqnr_db']:.1f}"] + asym + block)
        headers = ["M", "in", "out", "bf16 nn.Linear TFLOP/s", "QuantLinear TOPS", "speed-up", "SQNR dB",
                   "asymmetric TOPS", "asymmetric / symmetric time", "per-block TOPS", "per-block speed-up",
                   "per-block SQNR dB"]
        legend = ("The Llama-3-8B MLP projections at M = 2048 tokens: `QuantLinear.from_linear` (weights per "
                  "channel, activations quantized per token inside the forward) against the bf16 `nn.Linear` "
                  "it came from, timed alternately in rounds; SQNR of the int8 output against bf16. "
                  "Asymmetric: the same layer with `asymmetric=True` (a zero point per token, corrected by the "
                  "weight's column sums in the epilogue); per-block: `weight=\"block\", activation=\"block\"` "
                  "(128x128 weight blocks, 1x128 activation groups); all timed in the same rounds.")
        sections["bench_scaled mlp"] = "\n\n".join(["## QuantLinear against bf16 nn.Linear", header, legend,
                                                    report.markdown_table(headers, rows)])
    return sections


def render(args: argparse.Namespace) -> int:
    doc = json.loads(args.render.read_text())
    print(format_table(doc))
    if args.markdown:
        sections = markdown_sections(doc, args.tables, args.command)
        if not sections:
            print(f"{args.render}: nothing to write for --tables {args.tables}", file=sys.stderr)
            return 1
        report.update_markdown(args.markdown, sections)
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.bench_scaled", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the bar shapes only")
    p.add_argument("--no-peers", action="store_true",
                   help="time tcgemm only (no fp8, unfused or bf16 peers): short A/B rounds")
    p.add_argument("--json", type=Path, default=report.RESULTS_DIR / "bench_scaled.json",
                   help="JSON path (default: benchmarks/results/bench_scaled.json)")
    p.add_argument("--markdown", type=Path, default=None,
                   help="write the tables into this markdown file (its bench_scaled sections)")
    p.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                   help="no benchmark: read a JSON this script wrote and print/write its tables")
    p.add_argument("--tables", choices=TABLES + ("all",), default="all",
                   help="with --markdown: which tables to write (shapes, mlp, all)")
    p.add_argument("--command", default=None,
                   help="with --render: the command to name for a JSON that does not record its own")
    args = p.parse_args(argv)
    if args.command and not args.render:
        p.error("--command goes with --render")
    if args.render:
        return render(args)
    if not torch.cuda.is_available():
        print("bench_scaled: needs a CUDA GPU", file=sys.stderr)
        return 1
    import tcgemm

    device = torch.device("cuda", torch.cuda.current_device())
    print(f"tcgemm from {tcgemm.__file__}")
    meta = report.run_metadata(device, report.command_line("benchmarks.bench_scaled", argv))
    meta["quick"] = args.quick
    peers = not args.no_peers
    shapes = BAR_SHAPES + ([] if args.quick else EXTRA_SHAPES)
    records = []
    for shape in shapes:
        rec = bench_shape(shape, peers, device)
        records.append(rec)
        print("done", shape, {k: round(v) for k, v in rec["tops"].items()}, rec["errors"] or "", flush=True)
    mlp = [bench_mlp(*s, peers, device) for s in MLP_SHAPES]
    doc = {"meta": meta, "shapes": records, "mlp": mlp}
    report.write_json(doc, args.json)
    if args.markdown:
        report.update_markdown(args.markdown, markdown_sections(doc, args.tables, None))
    print()
    print(format_table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

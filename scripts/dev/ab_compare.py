"""Per-shape ratios new / base of two sets of benchmark JSON files (scripts/dev/ab_device.sh).

    python3 -m scripts.dev.ab_compare --base B0.json B1.json ... --new N0.json N1.json ... [--tolerance 0.02]

Reads what benchmarks.bench_gemm, benchmarks.bench_scaled or benchmarks.bench_decode wrote (--json),
one file per round and side (bench_decode: the CUDA-graph times, as TOPS; host times, from
bench_decode or scripts/dev/host_overhead.py, as calls per us). For every (method, shape) timed on both sides: the median TOPS over each side's rounds, the
ratio new / base, and the spread of the rounds. Prints the largest loss last; exits 1 when a loss
exceeds --tolerance.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def points(doc: Any) -> dict[str, float]:
    """TOPS per 'method MxNxK' in either benchmark's JSON."""
    out: dict[str, float] = {}
    if isinstance(doc, list):  # bench_gemm: one record per shape
        for rec in doc:
            for name, value in rec["tops"].items():
                if value is not None:
                    out[f"{name} {rec['M']}x{rec['N']}x{rec['K']}"] = value
        return out
    for rec in doc.get("shapes", []):  # bench_scaled
        m, n, k = rec["shape"]
        for name, value in rec["tops"].items():
            if value is not None:
                out[f"{name} {m}x{n}x{k}"] = value
    for rec in doc.get("decode", []) + doc.get("prefill", []):  # bench_decode: us per call in a graph
        m, n, k = rec["m"], rec["n"], rec["k"]
        for name, us in rec["graph"].items():
            if us:
                out[f"{name} {m}x{n}x{k}"] = 2 * m * n * k / us / 1e6
    for name, us in doc.get("host_us", {}).items():  # host time per call: calls per us, higher is better
        if us:
            out[f"host {name}"] = 1.0 / us
    for rec in doc.get("mlp", []):
        m, n, k = rec["mlp"]
        for name, field in (("QuantLinear", "quantlinear_tops"), ("bf16_Linear", "bf16_tops")):
            if rec.get(field) is not None:
                out[f"{name} {m}x{n}x{k}"] = rec[field]
    return out


def rounds(paths: list[Path]) -> dict[str, list[float]]:
    per_key: dict[str, list[float]] = {}
    for path in paths:
        for key, value in points(json.loads(path.read_text())).items():
            per_key.setdefault(key, []).append(value)
    return per_key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.ab_compare", description=__doc__.splitlines()[0])
    p.add_argument("--base", type=Path, nargs="+", required=True, help="the base side's JSON files")
    p.add_argument("--new", type=Path, nargs="+", required=True, help="the new side's JSON files")
    p.add_argument("--tolerance", type=float, default=0.02, help="largest loss accepted (default 0.02 = 2%%)")
    args = p.parse_args(argv)
    base, new = rounds(args.base), rounds(args.new)
    keys = [k for k in base if k in new]
    missing = sorted(set(base) ^ set(new))
    if not keys:
        print("no (method, shape) timed on both sides")
        return 1
    width = max(len(k) for k in keys)
    print(f"{'method shape':<{width}}  {'base TOPS':>10}  {'new TOPS':>10}  {'new/base':>8}  "
          f"rounds base / new (min-max)")
    worst_key, worst = keys[0], float("inf")
    for key in keys:
        b, n = statistics.median(base[key]), statistics.median(new[key])
        ratio = n / b
        if ratio < worst:
            worst_key, worst = key, ratio
        flag = "  <-- loss" if ratio < 1 - args.tolerance else ""
        print(f"{key:<{width}}  {b:10.1f}  {n:10.1f}  {ratio:7.3f}x  "
              f"{min(base[key]):.0f}-{max(base[key]):.0f} / {min(new[key]):.0f}-{max(new[key]):.0f}{flag}")
    if missing:
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        print(f"timed on one side only: {', '.join(missing[:8])}{more}")
    print(f"rounds: base {len(args.base)}, new {len(args.new)}; largest loss {max(0.0, 1 - worst):.1%} "
          f"({worst_key}: {worst:.3f}x); tolerance {args.tolerance:.0%}")
    return 0 if worst >= 1 - args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())

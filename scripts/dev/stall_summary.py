"""Where a kernel's warps stall: totals per stall reason and the instructions with the most
samples, from an Nsight Compute source page exported as CSV (scripts/dev/ncu_target.py shows how).

    python3 -m scripts.dev.stall_summary prof_sass.csv [--top 30]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.stall_summary", description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    rows = list(csv.reader(args.csv.open()))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    # instruction rows only (an export of several kernels repeats its header rows)
    header = rows[start]
    body = [r for r in rows[start + 1:] if len(r) == len(header) and r[0].startswith("0x")]
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and not h.endswith("(Not Issued)")]
    total = {r: sum(int(row[col[r]] or 0) for row in body) for r in reasons}
    samples = sum(total.values())
    print(f"{len(body)} instructions, {samples} samples")
    for r, v in sorted(total.items(), key=lambda kv: -kv[1]):
        if v:
            print(f"  {r:<24}{v:>9}  {100 * v / max(1, samples):5.1f}%")
    print(f"\ntop {args.top} instructions by samples (index, samples, top reasons, SASS):")
    scored = sorted(range(len(body)), key=lambda i: -int(body[i][col["Warp Stall Sampling (All Samples)"]] or 0))
    for i in scored[:args.top]:
        row = body[i]
        n = int(row[col["Warp Stall Sampling (All Samples)"]] or 0)
        top = sorted(((int(row[col[r]] or 0), r[6:]) for r in reasons), reverse=True)[:3]
        why = ", ".join(f"{name} {v}" for v, name in top if v)
        print(f"  {i:>6} {n:>7}  {why:<48} {row[col['Source']].strip()[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

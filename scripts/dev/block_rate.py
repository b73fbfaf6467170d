"""Per-block against per-channel scaled GEMM TOPS at the shapes of the 0.85x per-channel target.

SHAPES, the six on which per-block scales are held to 0.85x of per-channel TOPS: 4096^3, 8192^3 and
four Llama-3 layers at M = 512-4096.

    python3 -m scripts.dev.block_rate [--json PATH] [--shapes MxNxK ...]

Times tcgemm.scaled_gemm with per-token x per-channel scales and with 1x128 x 128x128 block
scales (bf16 out, bias) on the same rotated input sets, interleaved (benchmarks/timing.py), and
prints one line per shape; scripts/dev/promotion_variants.sh runs it once per diagnostic build.
--columns adds weight scales per column and 1x128 K block ([N, K/128]) on the default backend
and forced onto sm80 (scaled_colblock, scaled_colblock_sm80).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks import bench_scaled, timing

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (2048, 28672, 8192), (2048, 4096, 14336),
          (512, 8192, 8192)]


def column_block_methods(sets, k):
    """scaled_gemm with the weight's scales per column and 1x128 K block ([N, K/128], from each
    set's weight), on the default backend and on sm80."""
    import tcgemm

    for s in sets:
        n = s["w_bf16"].shape[0]
        s["swc"] = s["w_bf16"].float().abs().reshape(n, -(-k // 128), 128).amax(dim=2) / 127

    def run(i, backend):
        s = sets[i]
        return tcgemm.scaled_gemm(s["qxb"], s["qw"].t(), s["sxb"], s["swc"], s["bias"], backend=backend)

    return {"scaled_colblock": lambda i: run(i, "auto"), "scaled_colblock_sm80": lambda i: run(i, "sm80")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.block_rate", description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--shapes", nargs="*", default=None, help="MxNxK (default: the six of the 0.85x per-channel target)")
    p.add_argument("--columns", action="store_true", help="also [N, K/128] weight scales (default backend, sm80)")
    args = p.parse_args(argv)
    shapes = SHAPES if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes]
    device = torch.device("cuda", torch.cuda.current_device())
    records = []  # bench_scaled's "shapes" records, so scripts.dev.ab_compare reads them
    for m, n, k in shapes:
        n_sets = max(2, min(timing.input_sets((m + n) * k, device) // 2, 6))
        sets = bench_scaled.make_sets(m, n, k, n_sets, device)
        fns = {name: fn for name, fn in bench_scaled.methods(sets, peers=False).items()
               if name in ("scaled_chan", "scaled_block")}
        if args.columns:
            fns.update(column_block_methods(sets, k))
        ms = timing.interleaved_ms(fns, n_sets, max_reps=120, device=device)
        tops = {name: timing.tops(m, n, k, t) for name, t in ms.items()}
        records.append({"shape": [m, n, k], "tops": tops})
        extra = "".join(f"  {name} {tops[name]:.0f}" for name in tops if name.startswith("scaled_colblock"))
        print(f"{m}x{n}x{k}: per-channel {tops['scaled_chan']:.0f}  per-block {tops['scaled_block']:.0f}  "
              f"ratio {tops['scaled_block'] / tops['scaled_chan']:.3f}{extra}", flush=True)
        del sets
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps({"shapes": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

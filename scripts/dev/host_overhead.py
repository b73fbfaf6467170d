"""Host time per call of the GEMM ops: what a small, launch-bound problem pays on the CPU.

    python3 -m scripts.dev.host_overhead [--json PATH] [--rounds R]

Many back-to-back calls and one synchronize (benchmarks/timing.py host_us): when the kernels are
shorter than the host work, this is the host's cost per call (checks, dispatch, launch). Each
call's figure is the best of R rounds (default 3), the rounds interleaved over the calls; --json
writes them as {"host_us": {name: us}} (scripts/dev/ab_compare.py reads it).
"""

import argparse
import json
import math
import sys

import torch

import tcgemm
from benchmarks import timing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.host_overhead", description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each figure is the best (default 3)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    a = torch.randint(-128, 128, (1, 64), device="cuda", dtype=torch.int8)
    a32 = torch.randint(-128, 128, (32, 64), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (64, 64), device="cuda", dtype=torch.int8).t().contiguous().t()
    out = torch.empty(1, 64, dtype=torch.int32, device="cuda")
    x = torch.ones(64, device="cuda")
    rows = [("torch.add (baseline)", lambda: torch.add(x, x)),
            ("torch._int_mm 32x64x64", lambda: torch._int_mm(a32, b))]
    for backend in tcgemm.available_backends("cuda"):
        rows.append((f"tcgemm.int8_gemm {backend}", lambda be=backend: tcgemm.int8_gemm(a, b, backend=be)))
        rows.append((f"tcgemm.gemm out= {backend}", lambda be=backend: tcgemm.gemm(a, b, backend=be, out=out)))
    # The scaled path on a tiny problem: quantize + scaled_gemm, and the QuantLinear forward.
    xs = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    lin = tcgemm.QuantLinear.from_linear(torch.nn.Linear(256, 256, device="cuda", dtype=torch.bfloat16))
    qx, sx = tcgemm.quantize(xs, "token")
    rows += [("tcgemm.quantize token", lambda: tcgemm.quantize(xs, "token")),
             ("tcgemm.scaled_gemm", lambda: tcgemm.scaled_gemm(qx, lin.weight.t(), sx, lin.weight_scale, lin.bias)),
             ("QuantLinear forward", lambda: lin(xs))]
    # A decode step's layer at one row: W8A8 and W4A8 (the quantizing skinny kernel, one launch).
    x1 = xs[:1]
    lin4 = tcgemm.QuantLinear.from_linear(torch.nn.Linear(256, 256, device="cuda", dtype=torch.bfloat16),
                                          scheme="w4a8")
    rows += [("QuantLinear forward M=1", lambda: lin(x1)), ("QuantLinear w4a8 forward M=1", lambda: lin4(x1))]
    # The ops called as torch.ops, without the Python API's checks: the binding's own cost.
    raw_gemm, raw_ql = torch.ops.tcgemm.gemm.default, torch.ops.tcgemm.quant_linear.default
    w, sw, bias = lin.weight, lin.weight_scale, lin.bias
    rows += [("torch.ops.tcgemm.gemm (raw)", lambda: raw_gemm(a, b, None, 1, 0, "auto")),
             ("torch.ops.tcgemm.quant_linear M=1 (raw)", lambda: raw_ql(x1, w, sw, bias, "token"))]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    best = {}
    with torch.no_grad():
        for _ in range(args.rounds):
            for name, fn in rows:
                best[name] = min(best.get(name, math.inf), timing.host_us(fn))
    for name, us in best.items():
        print(f"{name:40s} {us:7.2f} us/call")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"host_us": best}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

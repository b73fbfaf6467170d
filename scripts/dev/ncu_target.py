"""One tcgemm op at one shape, for Nsight Compute: the profiled calls run inside the NVTX range
"target", so ncu picks them by that range and not by kernel names.

    ncu --nvtx --nvtx-include "target/" --clock-control none --launch-count 1 \
        --section SpeedOfLight --section WarpStateStats --section SourceCounters \
        -o prof python3 -m scripts.dev.ncu_target scaled_block 4096x4096x4096
    ncu --import prof.ncu-rep --page source --csv --print-source sass > prof_sass.csv   # stalls per instruction

Ops: int8_gemm (exact int32; --backend to force one), int4_gemm (the same against a packed 4-bit
weight with int8 group scales), scaled_chan (per-token x per-channel scales,
bias, bf16 out), scaled_block (1x128 x 128x128 scales), quantize (per-token), quantlinear (one
QuantLinear forward: quantize, then the scaled GEMM; use --launch-count 2), w4a8 (the same with
QuantLinear(scheme="w4a8"): two-level 4-bit weights), fp8_block (the peer:
torch._scaled_mm in fp8 e4m3 with 1x128 x 128x128 block scales, bf16 out, as bench_scaled runs
it). Inputs are random,
as the benchmarks use them; warm-up calls run outside the range.
"""

import argparse

import torch

import tcgemm

OPS = ("int8_gemm", "int4_gemm", "scaled_chan", "scaled_block", "quantize", "quantlinear", "w4a8", "fp8_block")


def make_call(op: str, m: int, n: int, k: int, backend: str):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda") * 0.02
    if op == "int8_gemm":
        a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
        b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8).t()
        return lambda: tcgemm.int8_gemm(a, b, backend=backend)
    if op == "int4_gemm":
        a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
        packed = torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8)
        group = torch.randint(1, 17, (n, -(-k // 128)), device="cuda", dtype=torch.int8)
        return lambda: tcgemm.int4_gemm(a, packed, group, backend=backend)
    if op == "quantize":
        return lambda: tcgemm.quantize(x, "token")
    if op == "fp8_block":
        from benchmarks.bench_scaled import fp8_block_operands

        f = fp8_block_operands(x, w)
        return lambda: torch._scaled_mm(f["fxb"], f["fwb"].t(), scale_a=f["fsxb"], scale_b=f["fswb"],
                                        out_dtype=torch.bfloat16)
    if op in ("quantlinear", "w4a8"):
        scheme = {"scheme": "w4a8"} if op == "w4a8" else {}
        lin = tcgemm.QuantLinear.from_linear(torch.nn.Linear(k, n, device="cuda", dtype=torch.bfloat16), **scheme)
        return lambda: lin(x)
    qw, sw = tcgemm.quantize(w, "token")
    bias = torch.randn(n, device="cuda")
    if op == "scaled_chan":
        qx, sx = tcgemm.quantize(x, "token")
        return lambda: tcgemm.scaled_gemm(qx, qw.t(), sx, sw.reshape(-1), bias, backend=backend)
    qx, sx = tcgemm.quantize(x, "group")
    block = 128
    nb, kb = -(-n // block), -(-k // block)
    wp = torch.nn.functional.pad(w.abs(), (0, kb * block - k, 0, nb * block - n))
    swb = (wp.reshape(nb, block, kb, block).amax(dim=(1, 3)) / 127).float().contiguous()
    return lambda: tcgemm.scaled_gemm(qx, qw.t(), sx, swb, bias, backend=backend)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.ncu_target", description=__doc__.splitlines()[0])
    p.add_argument("op", choices=OPS)
    p.add_argument("shape", help="MxNxK, e.g. 4096x4096x4096")
    p.add_argument("--backend", default="auto", help="tcgemm backend for the GEMM ops (default auto)")
    p.add_argument("--calls", type=int, default=3, help="calls inside the NVTX range (default 3)")
    args = p.parse_args(argv)
    m, n, k = (int(v) for v in args.shape.lower().split("x"))
    call = make_call(args.op, m, n, k, args.backend)
    with torch.no_grad():
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("target")
        for _ in range(args.calls):
            call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    print(f"{args.op} {m}x{n}x{k}: {args.calls} calls in NVTX range 'target'")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

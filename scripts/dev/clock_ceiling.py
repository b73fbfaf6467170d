"""How close each GEMM runs to the tensor pipe's ceiling at the clock it actually gets.

    python3 -m scripts.dev.clock_ceiling [--seconds 3] [--scaled]

For each shape, tcgemm (auto) and cuBLASLt (its heuristic's first algorithm, the peer of
benchmarks/bench_gemm.py) each run back to back for a window of a few seconds
(benchmarks/timing.py window_ms), in alternating order over two rounds, while nvidia-smi samples
the SM clock and power every 100 ms. Per window: TOPS, the mean SM clock and power in the window,
and TOPS / (SMs x 8192 s8 ops per clock per SM x clock): the dense s8 wgmma rate of an H100/H200
SM is 8192 ops per clock (1979 TOPS at 1830 MHz on 132 SMs by the datasheet). Sustained, an
H200 sits at its power limit, so these rates sit below the burst figures of the benchmarks.
With --scaled, the methods are those of benchmarks/bench_scaled.py (bf16 out, bias, its inputs):
scaled_gemm per-channel, fp8 torch._scaled_mm row-wise, scaled_gemm per-block and cuBLASLt's
int8 GEMM on the same quantized operands (the fp8 dense rate per SM is the same 8192 ops per clock).
"""

from __future__ import annotations

import argparse
import subprocess
import time

import torch

import tcgemm
from benchmarks import bench_gemm, bench_scaled, timing

SHAPES = [(4096, 4096, 4096), (4096, 14336, 4096), (2048, 28672, 8192), (8192, 8192, 8192)]
OPS_PER_CLOCK_PER_SM = 8192
N_SETS = 3
WORKSPACE_BYTES = bench_gemm.CUBLASLT_WORKSPACE_BYTES


def int8_methods(m, n, k, dev, peer):
    a = [torch.randint(-128, 128, (m, k), device=dev, dtype=torch.int8) for _ in range(N_SETS)]
    w = [torch.randint(-128, 128, (n, k), device=dev, dtype=torch.int8) for _ in range(N_SETS)]
    d = torch.empty(m, n, dtype=torch.int32, device=dev)
    fns = {"tcgemm": lambda i: tcgemm.int8_gemm(a[i], w[i].t(), out=d)}
    if peer is not None:
        plan = peer.Plan(m, n, k, WORKSPACE_BYTES, 1)
        ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        fns["cublasLt"] = lambda i: plan.run(0, a[i], w[i], d, ws)
    return fns


def scaled_methods(m, n, k, dev, peer):
    sets = bench_scaled.make_sets(m, n, k, N_SETS, dev)
    all_fns = bench_scaled.methods(sets)
    fns = {name: all_fns[name] for name in ("scaled_chan", "fp8_rowwise", "scaled_block")}
    if peer is not None:  # cuBLASLt's int8 GEMM (int32 out) on the same quantized operands
        plan = peer.Plan(m, n, k, WORKSPACE_BYTES, 1)
        d = torch.empty(m, n, dtype=torch.int32, device=dev)
        ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
        fns["cublasLt_i8"] = lambda i: plan.run(0, sets[i]["qx"], sets[i]["qw"], d, ws)
    return fns


def smi_samples(text: str) -> list[tuple[float, float, float]]:
    """(wall time, SM MHz, W) from nvidia-smi's csv lines."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            stamp, _, frac = parts[0].partition(".")
            ts = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + (frac or "0"))
            samples.append((ts, float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue
    return samples


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.clock_ceiling", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="length of each window (default 3)")
    p.add_argument("--scaled", action="store_true", help="the scaled GEMM and its peers instead of int8_gemm")
    args = p.parse_args(argv)
    dev = torch.device("cuda", torch.cuda.current_device())
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    peer, _ = bench_gemm.load_cublaslt_peer(dev)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    rows = []
    try:
        for (m, n, k) in SHAPES:
            fns = scaled_methods(m, n, k, dev, peer) if args.scaled else int8_methods(m, n, k, dev, peer)
            for rnd in range(2):
                for name in (list(fns) if rnd == 0 else list(fns)[::-1]):
                    ms, t0, t1 = timing.window_ms(fns[name], N_SETS, args.seconds, device=dev)
                    rows.append((f"{m}x{n}x{k}", name, timing.tops(m, n, k, ms), t0, t1))
            del fns
            torch.cuda.empty_cache()
    finally:
        smi.terminate()
    samples = smi_samples(smi.communicate()[0])
    print(f"{torch.cuda.get_device_name(dev)}, {args.seconds:g} s windows, two rounds in alternating order")
    print(f"{'shape':>16} {'method':>12} {'TOPS':>7} {'SM MHz':>7} {'W':>5} {'of ceiling':>10}")
    for shape, name, tops, t0, t1 in rows:
        inside = [s for s in samples if t0 + 0.3 <= s[0] <= t1]  # past the window's ramp
        if not inside:
            print(f"{shape:>16} {name:>12} {tops:7.0f}       -     -          -")
            continue
        mhz = sum(s[1] for s in inside) / len(inside)
        watts = sum(s[2] for s in inside) / len(inside)
        ceiling = sms * OPS_PER_CLOCK_PER_SM * mhz * 1e6 / 1e12
        print(f"{shape:>16} {name:>12} {tops:7.0f} {mhz:7.0f} {watts:5.0f} {tops / ceiling:9.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

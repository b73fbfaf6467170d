"""How close each int8 GEMM runs to the tensor pipe's ceiling at the clock it actually gets.

    python3 tools/clock_ceiling.py [SECONDS_PER_WINDOW] [--scaled]

For each shape, tcgemm (auto) and cuBLASLt (its heuristic's first algorithm, as in
benchmarks/bench_gemm.py) run back to back for a window of a few seconds each, in alternating
order over two rounds, while nvidia-smi samples the SM clock and power every 100 ms. Per window:
TOPS (device events over batches of calls on rotated inputs), the mean SM clock in the window,
and TOPS / (SMs x 8192 s8 ops per clock per SM x clock): the dense s8 wgmma rate of an H100/H200
SM is 8192 ops per clock (1979 TOPS at 1830 MHz on 132 SMs by the datasheet).
With --scaled, the methods are those of benchmarks/bench_scaled.py (bf16 out, bias, its inputs):
scaled_gemm per-channel, fp8 torch._scaled_mm row-wise, scaled_gemm per-block and cuBLASLt's
int8 GEMM on the same quantized operands (the fp8 dense rate per SM is the same 8192 ops per clock).
"""

import os
import subprocess
import sys
import time

import torch

import tcgemm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import bench_gemm  # noqa: E402
import bench_scaled  # noqa: E402

SHAPES = [(4096, 4096, 4096), (4096, 14336, 4096), (2048, 28672, 8192), (8192, 8192, 8192)]
OPS_PER_CLOCK_PER_SM = 8192


def window(fn, n_sets, seconds):
    """Runs fn for about `seconds`; returns (median ms per call, start time, end time)."""
    times = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(20):
            fn(i % n_sets)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 20)
    times.sort()
    return times[len(times) // 2], t0, time.time()


def int8_methods(m, n, k, dev, peer):
    sets = 3
    a = [torch.randint(-128, 128, (m, k), device=dev, dtype=torch.int8) for _ in range(sets)]
    w = [torch.randint(-128, 128, (n, k), device=dev, dtype=torch.int8) for _ in range(sets)]
    d = torch.empty(m, n, dtype=torch.int32, device=dev)
    ws = torch.empty(32 << 20, dtype=torch.uint8, device=dev)
    fns = {"tcgemm": lambda i: tcgemm.int8_gemm(a[i], w[i].t(), out=d)}
    if peer is not None:
        plan = peer.Plan(m, n, k, 32 << 20, 1)
        fns["cublasLt"] = lambda i: plan.run(0, a[i], w[i], d, ws)
    return fns, sets


def scaled_methods(m, n, k, dev, peer):
    sets = bench_scaled.make_sets(m, n, k, 3, dev)
    all_fns = bench_scaled.methods(sets)
    fns = {name: all_fns[name] for name in ("scaled_chan", "fp8_rowwise", "scaled_block")}
    if peer is not None:  # cuBLASLt's int8 GEMM (int32 out) on the same quantized operands
        plan = peer.Plan(m, n, k, 32 << 20, 1)
        d = torch.empty(m, n, dtype=torch.int32, device=dev)
        ws = torch.empty(32 << 20, dtype=torch.uint8, device=dev)
        fns["cublasLt_i8"] = lambda i: plan.run(0, sets[i]["qx"], sets[i]["qw"], d, ws)
    return fns, len(sets)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    scaled = "--scaled" in sys.argv
    seconds = float(args[0]) if args else 3.0
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    peer, _ = bench_gemm.load_cublaslt_peer(dev)
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    rows = []
    for (m, n, k) in SHAPES:
        fns, sets = scaled_methods(m, n, k, dev, peer) if scaled else int8_methods(m, n, k, dev, peer)
        for rnd in range(2):
            for name in (list(fns) if rnd == 0 else list(fns)[::-1]):
                for i in range(5):
                    fns[name](i % sets)
                ms, t0, t1 = window(fns[name], sets, seconds)
                rows.append((f"{m}x{n}x{k}", name, 2 * m * n * k / ms / 1e9, t0, t1))
    smi.terminate()
    samples = []
    for line in smi.communicate()[0].splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            stamp, _, frac = parts[0].partition(".")
            ts = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + (frac or "0"))
            samples.append((ts, float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue
    print(f"{'shape':>16} {'method':>12} {'TOPS':>7} {'SM MHz':>7} {'W':>5} {'of ceiling':>10}")
    for shape, name, tops_, t0, t1 in rows:
        inside = [s for s in samples if t0 + 0.3 <= s[0] <= t1]  # past the window's ramp
        if not inside:
            print(f"{shape:>16} {name:>12} {tops_:7.0f}       -     -          -")
            continue
        mhz = sum(s[1] for s in inside) / len(inside)
        watts = sum(s[2] for s in inside) / len(inside)
        ceiling = sms * OPS_PER_CLOCK_PER_SM * mhz * 1e6 / 1e12
        print(f"{shape:>16} {name:>12} {tops_:7.0f} {mhz:7.0f} {watts:5.0f} {tops_ / ceiling:9.1%}")


if __name__ == "__main__":
    main()

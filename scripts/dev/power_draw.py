"""Sustained time, SM clock and power of one QuantLinear layer (or bf16 nn.Linear), to tell a
layer bound by the GPU's power limit from one bound by its own work.

    python3 scripts/dev/power_draw.py K N M SCHEME      (SCHEME: a QuantLinear scheme, or bf16)

A CUDA graph of 20 calls on one input is replayed for two seconds while nvidia-smi samples the SM
clock, the power draw and the software power-cap throttle reason every 50 ms; prints the time per
call, the median clock and power and the share of samples with the power cap active.
"""

import subprocess
import sys
import time

import torch

import tcgemm


def main() -> int:
    k, n, m, scheme = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    lin = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = lin if scheme == "bf16" else tcgemm.QuantLinear.from_linear(lin, scheme=scheme)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        layer(x)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            layer(x)
    for _ in range(20):
        graph.replay()
    torch.cuda.synchronize()
    query = "clocks.sm,power.draw,clocks_event_reasons.sw_power_cap"
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-lms", "50"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    replays, t0 = 0, time.time()
    while time.time() - t0 < 2.0:
        for _ in range(10):
            graph.replay()
        replays += 10
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    rows = [[c.strip() for c in line.split(",")] for line in smi.stdout.read().strip().splitlines()[5:-2]]
    clock = sorted(float(r[0]) for r in rows)
    power = sorted(float(r[1]) for r in rows)
    capped = sum(r[2] == "Active" for r in rows) / max(1, len(rows))
    print(f"{scheme} {m}x{n}x{k}: {start.elapsed_time(end) * 1000 / (replays * 20):.1f} us per call, SM clock "
          f"{clock[len(clock) // 2]:.0f} MHz, power {power[len(power) // 2]:.0f} W (medians), power cap active in "
          f"{capped:.0%} of the samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())

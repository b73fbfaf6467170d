"""Times tcgemm backends on a few shapes (device events, warm-up, rotated inputs, median).

    python3 tools/time_gemm.py sm90 4096x4096x4096 8192x8192x8192
For quick A/B checks while tuning; benchmarks/bench_gemm.py is the full harness with peers.
"""

import statistics
import sys

import torch

import tcgemm


def time_shape(backend, m, n, k, sets=4, reps=30):
    g = torch.Generator(device="cuda").manual_seed(1)
    ins = [(torch.randint(-128, 128, (m, k), generator=g, device="cuda", dtype=torch.int16).to(torch.int8),
            torch.randint(-128, 128, (n, k), generator=g, device="cuda", dtype=torch.int16).to(torch.int8).t())
           for _ in range(sets)]
    out = torch.empty(m, n, dtype=torch.int32, device="cuda")
    for i in range(3):
        tcgemm.gemm(*ins[i % sets], backend=backend, out=out)
    times = []
    batch = 10  # back-to-back calls per timed batch, so host launch latency stays hidden
    for r in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for i in range(batch):
            tcgemm.gemm(*ins[(r * batch + i) % sets], backend=backend, out=out)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / batch)
    ms = statistics.median(times)
    return 2 * m * n * k / ms / 1e9


def main():
    backends = sys.argv[1].split(",")
    for shape in sys.argv[2:]:
        m, n, k = (int(x) for x in shape.split("x"))
        cells = [f"{b}={time_shape(b, m, n, k):7.1f}" for b in backends]
        print(f"{shape:>18}: " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()

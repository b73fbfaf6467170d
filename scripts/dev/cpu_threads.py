"""Speed of the CPU path on 1 and on N threads: int8_gemm 1024^3, interleaved rounds, median.

    python3 -m scripts.dev.cpu_threads [--threads 2] [--rounds 9]
"""

import argparse
import statistics
import time

import torch

import tcgemm


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.cpu_threads", description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args(argv)
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (1024, 1024), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (1024, 1024), generator=g, dtype=torch.int8)
    times = {1: [], args.threads: []}
    for _ in range(args.rounds):
        for threads in times:
            torch.set_num_threads(threads)
            t0 = time.perf_counter()
            tcgemm.int8_gemm(a, b)
            times[threads].append(time.perf_counter() - t0)
    med = {t: statistics.median(v) * 1e3 for t, v in times.items()}
    for t, ms in med.items():
        print(f"int8_gemm 1024^3 on the CPU, {t} thread(s): median {ms:.1f} ms over {args.rounds} rounds")
    print(f"speed-up {med[1] / med[args.threads]:.2f}x on {args.threads} threads")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

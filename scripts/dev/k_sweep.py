"""A backend against torch._int_mm over a K sweep, and the fit time = a + b * K.

    python3 -m scripts.dev.k_sweep [--backend sm80] [--rounds 3] [--mn 4096]

M = N = --mn over K = 1024 .. 16384, plus 8192^3; per shape the backend's int8_gemm, its scaled_gemm
(per-token x per-channel scales, bf16 out) and torch._int_mm, interleaved in rotated rounds
(benchmarks/timing.py). The intercept a is what a tile costs besides its K loop (prologue, epilogue,
output writes, wave tails); the slope b gives the main loop's rate, 2*M*N / b.
"""

import argparse
import statistics

import torch

import tcgemm
from benchmarks import timing

KS = (1024, 2048, 4096, 8192, 16384)


def make_sets(m, n, k):
    n_sets = timing.input_sets((m + n) * k, max_sets=8)
    sets = []
    for _ in range(n_sets):
        a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
        w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
        sets.append(dict(a=a, wt=w.t(), sa=torch.rand(m, 1, device="cuda"), sw=torch.rand(n, device="cuda")))
    return sets


def fit(ks, ts):
    mk, mt = statistics.mean(ks), statistics.mean(ts)
    b = sum((k - mk) * (t - mt) for k, t in zip(ks, ts)) / sum((k - mk) ** 2 for k in ks)
    return mt - b * mk, b


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m scripts.dev.k_sweep", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="sm80")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mn", type=int, default=4096, help="M = N of the sweep (default 4096)")
    args = p.parse_args(argv)
    be, mn = args.backend, args.mn
    shapes = [(mn, mn, k) for k in KS] + [(8192, 8192, 8192)]
    ms: dict[tuple, dict[str, float]] = {}
    for m, n, k in shapes:
        S = make_sets(m, n, k)
        exact = torch.equal(tcgemm.int8_gemm(S[0]["a"], S[0]["wt"], backend=be), torch._int_mm(S[0]["a"], S[0]["wt"]))
        fns = {
            be: lambda i: tcgemm.int8_gemm(S[i]["a"], S[i]["wt"], backend=be),
            "scaled": lambda i: tcgemm.scaled_gemm(S[i]["a"], S[i]["wt"], S[i]["sa"], S[i]["sw"], backend=be),
            "_int_mm": lambda i: torch._int_mm(S[i]["a"], S[i]["wt"]),
        }
        ms[(m, n, k)] = timing.interleaved_ms(fns, len(S), rounds=args.rounds)
        cells = " | ".join(f"{name} {timing.tops(m, n, k, t):6.0f}" for name, t in ms[(m, n, k)].items())
        print(f"{m}x{n}x{k}: {cells} TOPS, exact={exact}", flush=True)
        del S
        torch.cuda.empty_cache()
    print(f"== TOPS over K at {mn} x {mn}, 8192^3, and the fit time = a + b * K")
    for name in (be, "scaled", "_int_mm"):
        ts = [ms[(mn, mn, k)][name] for k in KS]
        a, b = fit(KS, ts)
        tops = [timing.tops(mn, mn, k, t) for k, t in zip(KS, ts)]
        print(f"{name:8s} " + " ".join(f"{x:6.0f}" for x in tops)
              + f" | 8192^3 {timing.tops(8192, 8192, 8192, ms[(8192, 8192, 8192)][name]):6.0f}"
              f" | a = {a * 1000:6.1f} us, loop rate {2 * mn * mn / b / 1e9:6.0f} TOPS")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

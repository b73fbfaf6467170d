"""sm80 against torch._int_mm: M = N = 4096 over a K sweep, plus 8192^3, and the fit time = a + b * K.

    python3 tools/ab_sm80.py [ROUNDS]      (tools/ab_device.sh passes ROUNDS)

The intercept a is what a tile costs besides its K loop (prologue, epilogue, output writes, wave
tails); the slope b is the main loop's rate. Scaled (per-channel, bf16 out) on sm80 as a third
column: the same main loop with half the output bytes.
"""

import os
import statistics
import sys

import torch

import tcgemm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_scaled import median_burst_ms  # noqa: E402

KS = (1024, 2048, 4096, 8192, 16384)
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 2


def sets(m, n, k, n_sets=3):
    out = []
    for _ in range(n_sets):
        a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
        w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
        out.append(dict(a=a, wt=w.t(), sa=torch.rand(m, 1, device="cuda"), sw=torch.rand(n, device="cuda")))
    return out


def fit(ks, ts):
    mk, mt = statistics.mean(ks), statistics.mean(ts)
    b = sum((k - mk) * (t - mt) for k, t in zip(ks, ts)) / sum((k - mk) ** 2 for k in ks)
    return mt - b * mk, b


def main():
    shapes = [(4096, 4096, k) for k in KS] + [(8192, 8192, 8192)]
    res = {s: {"sm80": [], "scaled": [], "_int_mm": []} for s in shapes}
    for _ in range(ROUNDS):
        for (m, n, k) in shapes:
            S = sets(m, n, k)
            ok = torch.equal(tcgemm.int8_gemm(S[0]["a"], S[0]["wt"], backend="sm80"),
                             torch._int_mm(S[0]["a"], S[0]["wt"]))
            fns = {
                "sm80": lambda i: tcgemm.int8_gemm(S[i]["a"], S[i]["wt"], backend="sm80"),
                "scaled": lambda i: tcgemm.scaled_gemm(S[i]["a"], S[i]["wt"], S[i]["sa"], S[i]["sw"], backend="sm80"),
                "_int_mm": lambda i: torch._int_mm(S[i]["a"], S[i]["wt"]),
            }
            order = list(fns) if _ % 2 == 0 else list(fns)[::-1]
            for name in order:
                res[(m, n, k)][name].append(median_burst_ms(fns[name], len(S), calls=40, warmup=3))
            fl = 2 * m * n * k / 1e9
            print(f"{m}x{n}x{k}: " + " | ".join(f"{nm} {fl / res[(m, n, k)][nm][-1]:6.0f}" for nm in fns)
                  + f" TOPS exact={ok}", flush=True)
            del S
            torch.cuda.empty_cache()
    print("== medians (TOPS) and fit over K at 4096 x 4096: time = a + b * K")
    for name in ("sm80", "scaled", "_int_mm"):
        ts = [statistics.median(res[(4096, 4096, k)][name]) for k in KS]
        a, b = fit(KS, ts)
        tops = [2 * 4096 * 4096 * k / t / 1e9 for k, t in zip(KS, ts)]
        big = statistics.median(res[(8192, 8192, 8192)][name])
        print(f"{name:8s} " + " ".join(f"{x:6.0f}" for x in tops) + f" | 8192^3 {2 * 8192 ** 3 / big / 1e9:6.0f}"
              f" | a = {a * 1000:6.1f} us, loop rate {2 * 4096 * 4096 / b / 1e9:6.0f} TOPS")


if __name__ == "__main__":
    main()

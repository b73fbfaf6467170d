"""Skinny-M timing: int8_gemm and scaled_gemm (auto) on decode shapes, with B streaming rate.

    python3 tools/ab_skinny.py [ROUNDS]     (tools/ab_device.sh passes ROUNDS; shapes timed ROUNDS times)

Environment: SHAPES="16x8192x8192,8x4096x4096" times only those; PEER=1 adds cuBLASLt (the best
of its heuristic's algorithms, built as in benchmarks/bench_gemm.py) in place of bf16.
"""


import os
import sys

import torch

import tcgemm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from ab_scaled import median_burst_ms  # noqa: E402

SHAPES = [(m, n, k) for (n, k) in [(8192, 8192), (4096, 4096), (14336, 4096), (4096, 14336), (28672, 8192)]
          for m in (1, 4, 16, 32, 48, 64)]
if os.environ.get("SHAPES"):
    SHAPES = [tuple(int(x) for x in shape.split("x")) for shape in os.environ["SHAPES"].split(",")]
PEER = None
if os.environ.get("PEER") == "1":
    import bench_gemm  # noqa: E402
    PEER, _ = bench_gemm.load_cublaslt_peer(torch.device("cuda"))
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 1


def timed(fn, n_sets):
    return median_burst_ms(fn, n_sets, calls=60, warmup=5)


def main():
    for (m, n, k) in SHAPES:
        n_sets = 3
        S = []
        for _ in range(n_sets):
            a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
            w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
            S.append(dict(a=a, wt=w.t(), sa=torch.rand(m, 1, device="cuda"), sw=torch.rand(n, device="cuda"),
                          bias=torch.randn(n, device="cuda"), x=a.to(torch.bfloat16), wb=w.to(torch.bfloat16).t()))
        ref = (S[0]["a"].double() @ S[0]["wt"].double()).to(torch.int64)
        ok = torch.equal(tcgemm.int8_gemm(S[0]["a"], S[0]["wt"]).long(), ref)
        for _ in range(ROUNDS):
            t_i = timed(lambda i: tcgemm.int8_gemm(S[i]["a"], S[i]["wt"]), n_sets)
            t_s = timed(lambda i: tcgemm.scaled_gemm(S[i]["a"], S[i]["wt"], S[i]["sa"], S[i]["sw"], S[i]["bias"]),
                        n_sets)
            if PEER is None:
                t_b = timed(lambda i: torch.mm(S[i]["x"], S[i]["wb"]), n_sets)
            else:
                plan = PEER.Plan(m, n, k, 32 << 20, 4)
                d = torch.empty(m, n, dtype=torch.int32, device="cuda")
                ws = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
                t_b = min(timed(lambda i: plan.run(j, S[i]["a"], S[i]["wt"].t(), d, ws), n_sets)
                          for j in range(plan.num_algos))
            t_m = timed(lambda i: torch._int_mm(S[i]["a"], S[i]["wt"]), n_sets) if m > 16 else float("nan")
            fl = 2 * m * n * k / 1e9
            print(f"{m:3d}x{n}x{k}: int8 {fl / t_i:7.1f} TOPS {n * k / t_i / 1e6:6.0f} GB/s | scaled {fl / t_s:7.1f}"
                  f" | {'bf16' if PEER is None else 'cublasLt'} {fl / t_b:7.1f} | _int_mm {fl / t_m:7.1f} | exact={ok}", flush=True)
        del S
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

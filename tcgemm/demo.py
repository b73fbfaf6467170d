"""The main job: shows tcgemm is exact and measures it against PyTorch's own paths.

    python -m tcgemm.demo            # GPU when present, else the CPU path (and says so)
    python -m tcgemm.demo --quick    # fewer shapes

On a GPU it checks every backend bit-exact against an int64 reference on odd shapes and all
four operand layouts, then times int8 GEMM (TN: activations [M,K] row-major, weight [N,K]) for
each backend against torch._int_mm and bf16 torch.matmul, with CUDA events over rotated inputs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tcgemm
from tcgemm.reference import gemm_reference


def _random_int8(shape, dtype, device, gen):
    low, high = (-128, 128) if dtype == torch.int8 else (0, 256)
    return torch.randint(low, high, shape, dtype=dtype, generator=gen).to(device)


def check_exact(device: str, backends: list[str]) -> bool:
    """Bit-exact int32 against int64 on odd shapes, mixed dtypes, the four layouts, alpha/beta/C."""
    gen = torch.Generator().manual_seed(2026)
    shapes = [(1, 1, 1), (7, 13, 5), (33, 100, 257), (129, 65, 1000), (1000, 257, 129)]
    ok = True
    for backend in backends:
        cases = 0
        for m, n, k in shapes:
            for da, db in [(torch.int8, torch.int8), (torch.uint8, torch.int8), (torch.int8, torch.uint8)]:
                for a_t, b_t in [(False, False), (True, False), (False, True), (True, True)]:
                    a = _random_int8((k, m) if a_t else (m, k), da, device, gen)
                    b = _random_int8((n, k) if b_t else (k, n), db, device, gen)
                    a, b = (a.t() if a_t else a), (b.t() if b_t else b)
                    c = torch.randint(-(2**20), 2**20, (m, n), dtype=torch.int32, generator=gen).to(device)
                    out = torch.full((m, n), -1234567, dtype=torch.int32, device=device)  # poison
                    got = tcgemm.gemm(a, b, c, alpha=3, beta=-2, out=out, backend=backend)
                    ref = gemm_reference(a, b, c, alpha=3, beta=-2)
                    assert ref.abs().sum() > 0
                    cases += 1
                    if not torch.equal(got.cpu(), ref):
                        ok = False
                        print(f"  MISMATCH backend={backend} shape={(m, n, k)} dtypes={(da, db)} transposed={(a_t, b_t)}")
        print(f"  {backend:12s} {cases} cases bit-exact" if ok else f"  {backend:12s} FAILED")
    return ok


def _median_ms(fn, inputs, reps: int) -> float:
    for i in range(3):
        fn(*inputs[i % len(inputs)])
    times = []
    for i in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        args = inputs[i % len(inputs)]
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_gpu(backends: list[str], shapes, reps: int) -> None:
    print(f"\nTOPS (2*M*N*K / s / 1e12), TN layout, median of {reps}, rotated inputs:")
    names = backends + ["torch._int_mm", "bf16 matmul"]
    print("  " + f"{'M x N x K':>22s}" + "".join(f"{n:>15s}" for n in names))
    for m, n, k in shapes:
        sets = max(2, min(8, (3 * 60 * 2**20) // (m * k + n * k)))  # exceed L2 so no set stays cached
        gen = torch.Generator().manual_seed(m + n + k)
        inputs = [(_random_int8((m, k), torch.int8, "cuda", gen), _random_int8((n, k), torch.int8, "cuda", gen).t())
                  for _ in range(sets)]
        flops = 2 * m * n * k
        row = []
        for backend in backends:
            ms = _median_ms(lambda a, b: tcgemm.int8_gemm(a, b, backend=backend), inputs, reps)
            row.append(flops / ms / 1e9)
        if m > 16 and n % 8 == 0 and k % 8 == 0:
            row.append(flops / _median_ms(torch._int_mm, inputs, reps) / 1e9)
        else:
            row.append(float("nan"))
        bf16 = [(a.to(torch.bfloat16), b.to(torch.bfloat16)) for a, b in inputs[:2]]
        row.append(flops / _median_ms(torch.matmul, bf16, reps) / 1e9)
        print("  " + f"{f'{m} x {n} x {k}':>22s}" + "".join(f"{v:15.0f}" for v in row), flush=True)


def run_cpu() -> bool:
    print("No CUDA device visible: running the CPU path (slow, for correctness; the GPU kernels need a GPU).")
    ok = check_exact("cpu", ["cpu"])
    a = torch.randint(-128, 128, (256, 1024), dtype=torch.int8)
    b = torch.randint(-128, 128, (1024, 256), dtype=torch.int8)
    start = time.perf_counter()
    tcgemm.int8_gemm(a, b)
    secs = time.perf_counter() - start
    print(f"  CPU path: 256 x 256 x 1024 in {secs * 1e3:.1f} ms ({2 * 256 * 256 * 1024 / secs / 1e9:.2f} GOPS)")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    args = parser.parse_args()
    print(f"tcgemm {tcgemm.__version__}, torch {torch.__version__}")
    if not torch.cuda.is_available():
        raise SystemExit(0 if run_cpu() else 1)
    backends = tcgemm.available_backends("cuda")
    print(f"GPU: {torch.cuda.get_device_name()}, backends: {', '.join(backends)}")
    print("Exactness (int32 vs int64 reference):")
    ok = check_exact("cuda", backends)
    fast = [b for b in backends if b != "wmma_simple"]
    shapes = [(4096, 4096, 4096), (16, 4096, 4096)] if args.quick else [
        (4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096), (512, 8192, 8192), (16, 8192, 8192)]
    time_gpu(fast, shapes, reps=10 if args.quick else 30)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()

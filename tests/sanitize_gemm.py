"""Small GEMMs on every CUDA backend for compute-sanitizer (not collected by pytest).

    compute-sanitizer --tool memcheck  python tests/sanitize_gemm.py
    compute-sanitizer --tool racecheck python tests/sanitize_gemm.py

Shapes are small and odd so every edge path (M/N/K tails, padded copies, sign-flip offsets,
split-K) runs; each result is also checked bit-exact, and the script exits non-zero on a mismatch.
"""

import sys

import torch

import tcgemm
from tcgemm.reference import gemm_reference


def main() -> int:
    gen = torch.Generator().manual_seed(7)
    failures = 0
    for backend in tcgemm.available_backends("cuda"):
        for m, n, k in [(33, 17, 100), (130, 129, 257), (20, 200, 3000)]:
            for da, db, a_col in [(torch.int8, torch.int8, False), (torch.uint8, torch.int8, True)]:
                low_a = -128 if da == torch.int8 else 0
                a = torch.randint(low_a, low_a + 256, (k, m) if a_col else (m, k), generator=gen).to(da).cuda()
                a = a.t() if a_col else a
                b = torch.randint(-128, 128, (k, n), generator=gen).to(db).cuda()
                c = torch.randint(-1000, 1000, (m, n), dtype=torch.int32, generator=gen).cuda()
                d = tcgemm.gemm(a, b, c, alpha=2, beta=-1, backend=backend)
                ok = torch.equal(d.cpu(), gemm_reference(a, b, c, 2, -1))
                failures += not ok
                print(f"{backend:12s} {m}x{n}x{k} {da} x {db} a_col={a_col}: {'exact' if ok else 'MISMATCH'}")
    torch.cuda.synchronize()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Quick exactness check of one backend over a spread of shapes and dtypes (GPU, float64 reference).

    python3 tools/smoke_gemm.py sm90
Float64 on the GPU is exact here: every |partial sum| <= K * 2**16 < 2**53. Prints one line per
case and exits non-zero on the first mismatch.
"""

import sys

import torch

import tcgemm

SHAPES = [(1, 1, 1), (1, 8, 16), (7, 9, 33), (64, 64, 128), (65, 130, 257), (128, 256, 128), (129, 257, 1000),
          (256, 512, 4096), (1000, 777, 513), (2048, 2048, 2048), (16, 4096, 4096), (128, 8192, 8192),
          (4097, 300, 640), (3, 5000, 8192)]


def main():
    backend = sys.argv[1] if len(sys.argv) > 1 else "auto"
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k in SHAPES:
        for adt, bdt in ((torch.int8, torch.int8), (torch.uint8, torch.int8), (torch.int8, torch.uint8),
                         (torch.uint8, torch.uint8)):
            lo_a, hi_a = (-128, 128) if adt == torch.int8 else (0, 256)
            lo_b, hi_b = (-128, 128) if bdt == torch.int8 else (0, 256)
            a = torch.randint(lo_a, hi_a, (m, k), generator=g, device="cuda", dtype=torch.int16).to(adt)
            bt = torch.randint(lo_b, hi_b, (n, k), generator=g, device="cuda", dtype=torch.int16).to(bdt)
            b = bt.t()
            out = torch.full((m, n), -1234567, dtype=torch.int32, device="cuda")
            tcgemm.gemm(a, b, backend=backend, out=out)
            ref = (a.double() @ b.double())
            ref = ((ref.long() + 2**31) % 2**32 - 2**31).int()
            ok = torch.equal(out, ref)
            print(f"{backend} {m}x{n}x{k} {adt}x{bdt}: {'ok' if ok else 'MISMATCH'}", flush=True)
            if not ok:
                bad = (out != ref).nonzero()
                print("first bad", bad[:5].tolist(), out[tuple(bad[0])].item(), ref[tuple(bad[0])].item())
                sys.exit(1)


if __name__ == "__main__":
    main()

"""Host time per call of the GEMM ops (what a small, launch-bound problem pays on the CPU).

    python3 tools/host_overhead.py
Times many back-to-back calls with perf_counter and a single synchronize at the end; when the
kernels are shorter than the host work, this is the host cost per call.
"""

import time

import torch

import tcgemm


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    a = torch.randint(-128, 128, (1, 64), device="cuda", dtype=torch.int8)
    a32 = torch.randint(-128, 128, (32, 64), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (64, 64), device="cuda", dtype=torch.int8).t().contiguous().t()
    out = torch.empty(1, 64, dtype=torch.int32, device="cuda")
    x = torch.ones(64, device="cuda")
    rows = [("torch.add (baseline)", lambda: torch.add(x, x)),
            ("torch._int_mm 32x64x64", lambda: torch._int_mm(a32, b))]
    for backend in tcgemm.available_backends("cuda"):
        rows.append((f"tcgemm.int8_gemm {backend}", lambda be=backend: tcgemm.int8_gemm(a, b, backend=be)))
        rows.append((f"tcgemm.gemm out= {backend}", lambda be=backend: tcgemm.gemm(a, b, backend=be, out=out)))
    # The scaled path on a tiny problem: quantize + scaled_gemm, and the QuantLinear forward.
    xs = torch.randn(8, 256, device="cuda", dtype=torch.bfloat16)
    lin = tcgemm.QuantLinear.from_linear(torch.nn.Linear(256, 256, device="cuda", dtype=torch.bfloat16))
    qx, sx = tcgemm.quantize(xs, "token")
    rows += [("tcgemm.quantize token", lambda: tcgemm.quantize(xs, "token")),
             ("tcgemm.scaled_gemm", lambda: tcgemm.scaled_gemm(qx, lin.weight.t(), sx, lin.weight_scale, lin.bias)),
             ("QuantLinear forward", lambda: lin(xs))]
    with torch.no_grad():
        for name, fn in rows:
            print(f"{name:34s} {per_call_us(fn):7.1f} us/call")


if __name__ == "__main__":
    main()

"""Host time per call of the GEMM ops: what a small, launch-bound problem pays on the CPU.

    python3 -m scripts.dev.host_overhead

Many back-to-back calls and one synchronize (benchmarks/timing.py host_us): when the kernels are
shorter than the host work, this is the host's cost per call (checks, dispatch, launch).
"""

import torch

import tcgemm
from benchmarks import timing


def main() -> int:
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
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    with torch.no_grad():
        for name, fn in rows:
            print(f"{name:34s} {timing.host_us(fn):7.1f} us/call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

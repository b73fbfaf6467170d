"""The main job: shows tcgemm is exact and measures it against PyTorch's own paths.

    python3 -m examples.demo            # from the repository root; GPU when present, else the CPU path
    python3 -m examples.demo --quick    # fewer shapes and repetitions

On a GPU it checks every backend bit-exact against an int64 reference on odd shapes and all
four operand layouts, then times int8 GEMM (TN: activations [M,K] row-major, weight [N,K]) for
each backend against torch._int_mm and bf16 torch.matmul (benchmarks/timing.py: device events,
warm-up, median, rotated inputs).

Then the quantized-model part (tcgemm.nn): a small MLP trained on scikit-learn's digits is
quantized with quantize_model (float vs int8 accuracy, on the CPU and on the GPU), and on a GPU a
Llama-3-8B-style gated MLP block (4096 -> 14336 -> 4096, bf16, 2048 tokens) is timed against its
W8A8 version, with the SQNR of the int8 output against bf16.
"""

from __future__ import annotations

import argparse
import copy
import math
import time

import torch
from torch import nn

import tcgemm
import tcgemm.nn
from benchmarks import timing
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
    """Median device time (ms) of `reps` calls fn(*inputs[i]) over the rotated input tuples."""
    return timing.median_ms(lambda i: fn(*inputs[i]), len(inputs), max_reps=reps, min_reps=reps)


def time_gpu(backends: list[str], shapes, reps: int) -> None:
    print(f"\nTOPS (2*M*N*K / s / 1e12), TN layout, median of {reps}, rotated inputs:")
    names = backends + ["torch._int_mm", "bf16 matmul"]
    print("  " + f"{'M x N x K':>22s}" + "".join(f"{n:>15s}" for n in names))
    for m, n, k in shapes:
        sets = timing.input_sets(m * k + n * k, max_sets=8)  # exceed L2 so no set stays cached
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


def _sqnr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    """10*log10(signal / noise) of ``out`` against ``ref``, in float64."""
    ref, out = ref.double(), out.double()
    noise = (ref - out).pow(2).sum().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.pow(2).sum().item() / noise)


def train_digits_mlp(seed: int = 0):
    """A 64-256-256-10 ReLU MLP trained (fp32, CPU, ~1 s) on scikit-learn's 8x8 digits.

    Returns (model, x_test, y_test) on a held-out 797-image split, or None without scikit-learn.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(x), generator=gen)
    train, test = perm[:1000], perm[1000:]
    with torch.random.fork_rng():  # seeded weights without touching the caller's RNG state
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(300):
        batch = train[torch.randint(0, len(train), (128,), generator=gen)]
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), x[test], y[test]


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return 100.0 * (model(x).argmax(dim=1).cpu() == y).double().mean().item()


def demo_digits(device: str) -> None:
    """Float vs int8 accuracy of the trained digits MLP after tcgemm.nn.quantize_model."""
    print(f"\nQuantized model: digits MLP 64-256-256-10 on {device}")
    trained = train_digits_mlp()
    if trained is None:
        print("  scikit-learn is not installed: skipping the digits MLP (pip install scikit-learn)")
        return
    float_model, x_test, y_test = trained
    float_model = float_model.to(device)
    print(f"  float32 model: {_accuracy(float_model, x_test.to(device), y_test):.2f}% on {len(y_test)} held-out images")
    dtypes = [torch.float32, torch.bfloat16]
    for weight, activation in [("channel", "token"), ("block", "block")]:
        model = copy.deepcopy(float_model)
        report = tcgemm.nn.quantize_model(model, weight=weight, activation=activation)
        if weight == "channel":
            print("  " + str(report).replace("\n", "\n  "))
        accs = ", ".join(
            f"{str(dtype).replace('torch.', '')} inputs {_accuracy(model, x_test.to(device, dtype), y_test):.2f}%"
            for dtype in dtypes
        )
        print(f"  int8 weight={weight:7s} activation={activation:5s}: {accs}")


class GatedMLP(nn.Module):
    """Llama-style MLP block: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, dim: int, hidden: int, device=None, dtype=None) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False, device=device, dtype=dtype)
        self.up_proj = nn.Linear(dim, hidden, bias=False, device=device, dtype=dtype)
        self.down_proj = nn.Linear(hidden, dim, bias=False, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def demo_llama_mlp(reps: int, tokens: int = 2048, dim: int = 4096, hidden: int = 14336) -> None:
    """Llama-3-8B MLP block in bf16 vs the same block after quantize_model (GPU only)."""
    print(f"\nQuantized model: Llama-3-8B-style MLP block ({dim} -> 2x{hidden} -> {dim}, SiLU-gated), "
          f"{tokens} tokens, median of {reps}")
    torch.manual_seed(0)
    block = GatedMLP(dim, hidden, device="cuda", dtype=torch.bfloat16)
    # Two input sets (the weights, 350 MB in bf16, are far larger than L2 anyway).
    inputs = [(torch.randn(tokens, dim, device="cuda", dtype=torch.bfloat16),) for _ in range(2)]
    flops = 2 * tokens * 3 * dim * hidden
    with torch.no_grad():
        exact = copy.deepcopy(block).float()(inputs[0][0].float())
        ref = block(inputs[0][0])
        bf16_ms = _median_ms(block, inputs, reps)
        print(f"  {'bf16 nn.Linear':34s} {bf16_ms:8.3f} ms  {flops / bf16_ms / 1e9:6.0f} TFLOPS"
              f"  SQNR vs fp32 {_sqnr_db(exact, ref):5.1f} dB")
        for weight, activation in [("channel", "token"), ("block", "block")]:
            qblock = copy.deepcopy(block)
            tcgemm.nn.quantize_model(qblock, weight=weight, activation=activation)
            out = qblock(inputs[0][0])
            ms = _median_ms(qblock, inputs, reps)
            name = f"int8 W:{weight} A:{activation}"
            print(f"  {name:34s} {ms:8.3f} ms  {flops / ms / 1e9:6.0f} TOPS  "
                  f"SQNR vs bf16 {_sqnr_db(ref, out):5.1f} dB, vs fp32 {_sqnr_db(exact, out):5.1f} dB, "
                  f"speed-up {bf16_ms / ms:.2f}x")
            del qblock
    del block, exact
    torch.cuda.empty_cache()


def _skipped(part: str) -> None:
    print(f"\nSkipped: {part} (no CUDA device; this part needs a GPU)")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m examples.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer shapes and repetitions (GEMMs and the MLP block)")
    args = parser.parse_args()
    print(f"tcgemm {tcgemm.__version__}, torch {torch.__version__}")
    if not torch.cuda.is_available():
        ok = run_cpu()
        _skipped("TOPS against torch._int_mm and bf16 matmul")
        demo_digits("cpu")
        _skipped("digits MLP on the GPU")
        _skipped("Llama-3-8B-style MLP block against bf16")
        raise SystemExit(0 if ok else 1)
    backends = tcgemm.available_backends("cuda")
    print(f"GPU: {torch.cuda.get_device_name()}, backends: {', '.join(backends)}")
    print("Exactness (int32 vs int64 reference):")
    ok = check_exact("cuda", backends)
    fast = [b for b in backends if b != "wmma_simple"]
    shapes = [(4096, 4096, 4096), (16, 4096, 4096)] if args.quick else [
        (4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096), (512, 8192, 8192), (16, 8192, 8192)]
    time_gpu(fast, shapes, reps=10 if args.quick else 30)
    demo_digits("cpu")
    demo_digits("cuda")
    demo_llama_mlp(reps=10 if args.quick else 30)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()

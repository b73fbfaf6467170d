"""Paths of the sm90 (wgmma + TMA) kernel that the backend-generic sweep may not reach.

Each shape below lands on one tile plan of csrc/dispatch/heuristics.h (cooperative 128x256,
ping-pong 128x128, and 64x128 and 64x64 with and without split-K), and each is run
through every epilogue path:
  plain       alpha * A@B staged in shared memory and written by TMA stores;
  c           beta * C as well (the second, row-wise epilogue pass);
  odd_out     `out` whose row stride TMA cannot describe (direct register stores, or wrapping
              atomics under split-K).
The reference is float64 on the GPU, exact here (|partial sums| <= K * 2**16 < 2**53), wrapped
to int32 like the kernels' modulo-2**32 contract.
"""

import pytest
import torch

import tcgemm

DEV = "cuda"

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_sm90():
    """The sm90 backend on this GPU (without a GPU the ``gpu`` mark has skipped the test already)."""
    if "sm90" not in tcgemm.available_backends("cuda"):
        pytest.skip("needs the sm90 backend (compute capability 9.0, sm_90a build)")


# (M, N, K) -> plan chosen on a 132-SM H200 (other SM counts may pick another plan; still exact).
PLAN_SHAPES = [
    pytest.param(2048, 4096, 4608, id="coop128x256"),
    pytest.param(1536, 4096, 1024, id="pingpong128x128"),
    pytest.param(3000, 3000, 513, id="pingpong-odd"),
    pytest.param(200, 2600, 600, id="small64x128"),
    pytest.param(64, 4096, 14336, id="small-split4"),
    pytest.param(300, 1000, 2000, id="tiny64x64"),
    pytest.param(40, 300, 8192, id="tiny-split16"),
]

EPILOGUES = ("plain", "c", "odd_out")


def _wrap(x):
    return ((x + 2**31) % 2**32 - 2**31).to(torch.int32)


def _operands(m, n, k, gen, a_dtype=torch.int8, b_dtype=torch.int8):
    def rand(rows, cols, dtype):
        lo, hi = (-128, 128) if dtype == torch.int8 else (0, 256)
        return torch.randint(lo, hi, (rows, cols), generator=gen, device=DEV, dtype=torch.int16).to(dtype)

    a = rand(m, k, a_dtype)
    b = rand(n, k, b_dtype).t()  # [K, N] column-major: the nn.Linear weight layout
    return a, b


def _reference(a, b, c=None, alpha=1, beta=0):
    prod = (a.double() @ b.double()).long() % 2**32
    out = (alpha * prod) % 2**32
    if c is not None:
        out = out + beta * c.long()
    return _wrap(out).cpu()


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("m,n,k", PLAN_SHAPES)
def test_sm90_plans_and_epilogues(m, n, k, epilogue, check_exact):
    gen = torch.Generator(device=DEV).manual_seed(m * 7 + n * 13 + k)
    a, b = _operands(m, n, k, gen, torch.uint8 if m % 2 else torch.int8, torch.int8)
    alpha, beta, c = 1, 0, None
    if epilogue == "c":
        alpha, beta = -3, 5
        c = torch.randint(-(2**31), 2**31, (m, n), generator=gen, device=DEV, dtype=torch.int64).to(torch.int32)
    if epilogue == "odd_out":
        alpha = 7
        # Rows 4 * N + 4 bytes apart: not a multiple of 16, so no TMA store.
        out = torch.full((m, n + 1), -1234567, dtype=torch.int32, device=DEV)[:, :n]
    else:
        out = torch.full((m, n), -1234567, dtype=torch.int32, device=DEV)
    tcgemm.gemm(a, b, c, alpha, beta, backend="sm90", out=out)
    check_exact(out, _reference(a, b, c, alpha, beta), f"sm90 {m}x{n}x{k} {epilogue}")


@pytest.mark.parametrize("dtypes", [(torch.int8, torch.uint8), (torch.uint8, torch.uint8)], ids=["s8u8", "u8u8"])
def test_sm90_large_k_mixed_signs(dtypes, check_exact):
    m, n, k = 256, 512, 16384
    gen = torch.Generator(device=DEV).manual_seed(11)
    a, b = _operands(m, n, k, gen, *dtypes)
    check_exact(tcgemm.int8_gemm(a, b, backend="sm90"), _reference(a, b), "sm90 large K mixed signs")

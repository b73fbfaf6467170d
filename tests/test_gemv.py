"""The int8 GEMV (csrc/kernels/gemv): one row of int8 A against an int8 weight of 20 MiB or more on
sm90 (plan.h use_gemv). Exact against the int64 reference with every element of a poisoned output
written; every epilogue it takes gives the bits of the skinny kernel (which quantizes x itself
in quant_linear); smaller weights, per-block scales and other rows keep their kernels."""

import pytest
import torch

import tcgemm
from tcgemm.reference import gemm_reference

# (N, K): Llama layers, N and K off every multiple the kernel steps by, K = 16 (one 16-byte part)
GEMV_SHAPES = [(28672, 4096), (4096, 14336), (8192, 28672), (5121, 4112), (1310720, 16)]


def _needs_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the GEMV route is sm90's")


def kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def ran_gemv(fn):
    return any("gemv_int8_kernel" in name for name in kernel_names(fn))


def operands(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (1, k), generator=g, dtype=torch.int8)
    w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    return g, a, w


@pytest.mark.gpu
@pytest.mark.parametrize("n, k", GEMV_SHAPES)
def test_gemv_exact_into_poisoned_output(n, k):
    _needs_sm90()
    _, a, w = operands(n, k, n + k)
    want = gemm_reference(a, w.t())
    a_d, w_d = a.cuda(), w.cuda()
    assert ran_gemv(lambda: tcgemm.int8_gemm(a_d, w_d.t()))
    out = torch.full((1, n), -0x5A5A5A5A, dtype=torch.int32, device="cuda")
    tcgemm.int8_gemm(a_d, w_d.t(), out=out)
    assert torch.equal(out.cpu(), want)
    c = torch.randint(-1000, 1000, (1, n), dtype=torch.int32, device="cuda")
    got = tcgemm.gemm(a_d, w_d.t(), c, alpha=3, beta=-2)
    assert torch.equal(got.cpu(), gemm_reference(a, w.t(), c.cpu(), 3, -2))


@pytest.mark.gpu
@pytest.mark.parametrize("n, k", GEMV_SHAPES[:4])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gemv_scaled_epilogues_match_the_skinny_kernel(n, k, out_dtype):
    _needs_sm90()
    g, a, w = operands(n, k, 7 * n + k)
    a_d, b_d = a.cuda(), w.cuda().t()
    scale_a = (torch.rand(1, 1, generator=g) * 0.02 + 1e-3).cuda()
    scale_b = (torch.rand(1, n, generator=g) * 0.02 + 1e-3).cuda()
    bias = torch.randn(n, generator=g).cuda()
    zero = torch.randint(-20, 20, (1, 1), generator=g, dtype=torch.int32).cuda()
    colsum = w.sum(dim=1, dtype=torch.int32).cuda()
    for extra in ({}, {"zero_point_a": zero, "colsum_b": colsum}):
        run = lambda backend: tcgemm.scaled_gemm(a_d, b_d, scale_a, scale_b, bias, out_dtype, backend=backend, **extra)
        assert ran_gemv(lambda: run("auto"))
        assert torch.equal(run("auto"), run("skinny"))


@pytest.mark.gpu
@pytest.mark.parametrize("n, k", GEMV_SHAPES[:3])
@pytest.mark.parametrize("shape", [(1, None), (1, 1, None)])
def test_quant_linear_one_row_on_the_gemv(n, k, shape):
    _needs_sm90()
    g, _, w = operands(n, k, n - k)
    x = torch.randn(*shape[:-1], k, generator=g).to(torch.bfloat16).cuda()
    scale = (torch.rand(n, generator=g) * 0.01 + 1e-3).cuda()
    bias = torch.randn(n, generator=g).to(torch.bfloat16).cuda()
    w_d = w.cuda()
    assert ran_gemv(lambda: tcgemm.quant_linear(x, w_d, scale, bias=bias))
    got = tcgemm.quant_linear(x, w_d, scale, bias=bias)
    assert got.shape == (*shape[:-1], n)
    assert torch.equal(got, tcgemm.quant_linear(x, w_d, scale, bias=bias, backend="skinny"))


@pytest.mark.gpu
def test_gemv_route_is_one_row_of_a_large_int8_weight():
    _needs_sm90()
    g, a, w = operands(4096, 4096, 5)  # 16 MiB: the skinny kernel (quantizing x itself in quant_linear)
    assert not ran_gemv(lambda: tcgemm.int8_gemm(a.cuda(), w.cuda().t()))
    _, a2, w2 = operands(28672, 4096, 6)
    a2_d, w2_d = a2.cuda(), w2.cuda()
    two_rows = torch.cat([a2, a2]).cuda()
    assert not ran_gemv(lambda: tcgemm.int8_gemm(two_rows, w2_d.t()))
    assert torch.equal(tcgemm.int8_gemm(two_rows, w2_d.t()).cpu(), gemm_reference(two_rows.cpu(), w2.t()))
    # B row-major [K, N]: whatever route takes it, exact
    assert torch.equal(tcgemm.int8_gemm(a2_d, w2_d.t().contiguous()).cpu(), gemm_reference(a2, w2.t()))
    # per-block scales promote per K block: the skinny kernel
    scale_a = (torch.rand(1, 32, generator=g) + 0.5).cuda()
    scale_b = (torch.rand(28672, 32, generator=g) + 0.5).cuda()
    assert not ran_gemv(lambda: tcgemm.scaled_gemm(a2_d, w2_d.t(), scale_a, scale_b))

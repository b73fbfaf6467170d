"""tcgemm.scaled_gemm against a float64 reference of the dequantized product.

Stated bound: with e = the exact value (float64: exact int64 partial sums per 128-wide K block,
times the scales, plus bias), every output element satisfies
    |out - e| <= ulp_out(e) + 8 * KB * 2**-24 * S
where ulp_out is one unit in the last place of the output dtype at |e| (the one rounding to
bf16/fp16/fp32), KB the number of K blocks and S = sum_kb |partial_kb * sa * sb| + |bias| (the
fp32 arithmetic of the epilogue and of the per-block promotion). So bf16 outputs are within bf16
rounding of the exact value, up to fp32 noise.
"""

import zlib

import pytest
import torch

import tcgemm
from cases import ulp
from tcgemm.reference import scaled_gemm_reference

GRANULARITIES = [
    "tensor-tensor",     # scale_a [], scale_b [1]
    "token-channel",     # [M, 1] x [N]
    "token-channel2d",   # [M, 1] x [1, N]
    "block-block",       # [M, KB] x [NB, KB] (1x128 x 128x128)
    "block-channel",     # [M, KB] x [N]
    "token-block",       # [M, 1] x [NB, KB]
    "block-chanblock",   # [M, KB] x [N, KB]
]
OUT_DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _scales(gran, m, n, k, device, gen):
    kb, nb = max(1, -(-k // 128)), -(-n // 128)
    a_kind, b_kind = gran.split("-")
    # Scales of the size quantization produces (amax / 127), varied so every element matters.
    def rand(*shape):
        return (torch.rand(shape, generator=gen) * 1.5 + 0.5) * 0.02

    sa = {"tensor": lambda: rand(), "token": lambda: rand(m, 1), "block": lambda: rand(m, kb)}[a_kind]()
    sb = {
        "tensor": lambda: rand(1),
        "channel": lambda: rand(n),
        "channel2d": lambda: rand(1, n),
        "block": lambda: rand(nb, kb),
        "chanblock": lambda: rand(n, kb),
    }[b_kind]()
    return sa.to(device), sb.to(device)


def _operands(m, n, k, device, gen, b_layout="weight"):
    a = torch.randint(-127, 128, (m, k), dtype=torch.int8, generator=gen)
    if b_layout == "weight":  # nn.Linear weight [N, K] passed transposed: K-major, read in place
        b = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=gen).t()
    else:  # row-major [K, N]: the binding makes a K-major copy
        b = torch.randint(-127, 128, (k, n), dtype=torch.int8, generator=gen)
    return a.to(device), b.to(device)


def _bound(a, b, sa, sb, bias, out_dtype):
    """Per-element tolerance of the module docstring."""
    exact = scaled_gemm_reference(a, b, sa, sb, bias, return_float64=True)
    m, k = a.shape
    n = b.shape[1]
    kb = max(1, -(-k // 128))
    ones = lambda t: t.abs()
    s = scaled_gemm_reference(ones(a), ones(b), sa.abs(), sb.abs(), None if bias is None else bias.abs(),
                              return_float64=True)
    return exact, ulp(exact, out_dtype) + 8 * kb * 2.0**-24 * s


def _poison_allocator(numel, dtype, device):
    """Leaves NaN-filled memory in the caching allocator, so unwritten outputs show up as NaN."""
    if device == "cuda":
        x = torch.full((numel,), float("nan"), dtype=dtype, device=device)
        del x


def _check(out, a, b, sa, sb, bias, out_dtype, context):
    assert out.dtype == out_dtype and list(out.shape) == [a.shape[0], b.shape[1]], context
    exact, tol = _bound(a, b, sa, sb, bias, out_dtype)
    assert exact.abs().sum() > 0, f"degenerate reference ({context})"
    got = out.detach().cpu().double()
    assert torch.isfinite(got).all(), f"non-finite output ({context})"
    err = (got - exact).abs()
    bad = err > tol
    assert not bad.any(), (
        f"{int(bad.sum())} elements outside the bound ({context}); worst error {float(err.max()):.3g}, "
        f"e.g. at {tuple(bad.nonzero()[0].tolist())}: got {float(got[bad][0])}, exact {float(exact[bad][0])}"
    )


CPU_SHAPES = [(1, 1, 1), (7, 13, 200), (33, 130, 300), (64, 256, 384)]


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("gran", GRANULARITIES)
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_cpu_matches_reference(gran, out_dtype, with_bias):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{gran}{out_dtype}{with_bias}".encode()))
    for m, n, k in CPU_SHAPES:
        a, b = _operands(m, n, k, "cpu", gen)
        sa, sb = _scales(gran, m, n, k, "cpu", gen)
        bias = torch.randn(n, generator=gen).to(torch.bfloat16) if with_bias else None
        out = tcgemm.scaled_gemm(a, b, sa, sb, bias, out_dtype)
        _check(out, a, b, sa, sb, bias, out_dtype, f"cpu {gran} {(m, n, k)}")


def test_cpu_k_zero_gives_bias():
    a = torch.zeros(3, 0, dtype=torch.int8)
    b = torch.zeros(0, 5, dtype=torch.int8)
    bias = torch.arange(5, dtype=torch.float32)
    out = tcgemm.scaled_gemm(a, b, torch.ones(3, 1), torch.ones(5), bias, torch.float32)
    assert torch.equal(out, bias.expand(3, 5))
    assert tcgemm.scaled_gemm(a, b, torch.ones(()), torch.ones(()), None).abs().sum() == 0


def test_cpu_empty():
    a = torch.zeros(0, 16, dtype=torch.int8)
    b = torch.zeros(16, 4, dtype=torch.int8)
    out = tcgemm.scaled_gemm(a, b, torch.ones(()), torch.ones(4))
    assert out.shape == (0, 4) and out.dtype == torch.bfloat16


def test_cpu_quantized_roundtrip():
    """quantize -> scaled_gemm approximates the float product (the way QuantLinear uses them)."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(50, 300, generator=gen)
    w = torch.randn(70, 300, generator=gen)
    qx, sx = tcgemm.quantize(x, "token")
    qw, sw = tcgemm.quantize(w, "token")
    y = tcgemm.scaled_gemm(qx, qw.t(), sx, sw.reshape(-1), None, torch.float32)
    ref = x @ w.t()
    sqnr = 10 * torch.log10(ref.pow(2).sum() / (ref - y).pow(2).sum())
    assert sqnr > 30, f"SQNR {sqnr:.1f} dB"


def _args(m=4, n=8, k=256, device="cpu"):
    a = torch.ones(m, k, dtype=torch.int8, device=device)
    b = torch.ones(k, n, dtype=torch.int8, device=device)
    return a, b, torch.ones(m, 1, device=device), torch.ones(n, device=device)


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda a, b, sa, sb: (a.to(torch.uint8), b, sa, sb, {}), TypeError, r"argument 'a' must have dtype torch.int8"),
        (lambda a, b, sa, sb: (a, b[0], sa, sb, {}), ValueError, r"argument 'b' must be a 2-D tensor \[K, N\], got a 1-D tensor"),
        (lambda a, b, sa, sb: (a, b[:100], sa, sb, {}), ValueError, r"K mismatch"),
        (lambda a, b, sa, sb: (a, b, sa.half(), sb, {}), TypeError, r"argument 'scale_a' must have dtype torch.float32"),
        (lambda a, b, sa, sb: (a, b, torch.ones(3, 1), sb, {}), ValueError, r"argument 'scale_a' must have shape .*\[4, 1\] \(per-token\)"),
        (lambda a, b, sa, sb: (a, b, sa, torch.ones(7), {}), ValueError, r"argument 'scale_b' must have shape .*\[N\] = \[8\]"),
        (lambda a, b, sa, sb: (a, b, sa, sb, {"bias": torch.ones(3)}), ValueError, r"argument 'bias' must have shape \[N\] = \[8\]"),
        (lambda a, b, sa, sb: (a, b, sa, sb, {"bias": torch.ones(8, dtype=torch.int32)}), TypeError, r"argument 'bias' must have a floating-point dtype"),
        (lambda a, b, sa, sb: (a, b, sa, sb, {"out_dtype": torch.int32}), TypeError, r"argument 'out_dtype' must be torch.bfloat16"),
        (lambda a, b, sa, sb: (a, b, sa, sb, {"backend": "sm80"}), ValueError, r"backend 'sm80' needs CUDA tensors"),
        (lambda a, b, sa, sb: (a, b, sa, sb, {"backend": "bogus"}), ValueError, r"argument 'backend' must be one of"),
    ],
    ids=["uint8", "b-1d", "kmismatch", "scale-dtype", "scale_a-shape", "scale_b-shape", "bias-shape", "bias-dtype",
         "out-dtype", "backend-device", "backend-name"],
)
def test_cpu_errors(mutate, exc, match):
    a, b, sa, sb, kw = mutate(*_args())
    with pytest.raises(exc, match=match):
        tcgemm.scaled_gemm(a, b, sa, sb, **kw)


def test_long_k_needs_per_block_scales():
    a = torch.zeros(1, 131072, dtype=torch.int8)
    b = torch.zeros(131072, 1, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"K = 131072 > 131071 could overflow"):
        tcgemm.scaled_gemm(a, b, torch.ones(1, 1), torch.ones(1))
    out = tcgemm.scaled_gemm(a, b, torch.ones(1, 1024), torch.ones(1), None, torch.float32)
    assert out.item() == 0.0


# (M, N, K) where scale shapes of different layouts coincide: N <= 128 with ceil(K/128) == N
# ([1, N] is per-channel and 128x128 blocks), M == ceil(K/128) == N, one K block (per-token and
# per-block 1x128 coincide), single rows and columns, N over 128.
DECODE_SHAPES = [(3, 2, 200), (3, 3, 300), (2, 5, 100), (1, 1, 1), (1, 4, 500), (4, 130, 129), (5, 1, 300)]


def _candidate_shapes(m, n, k):
    kb, nb = max(1, -(-k // 128)), -(-n // 128)
    dims = {1, 2, 3, m, n, kb, nb, m + 1, n + 1, kb + 1}
    return [()] + [(d,) for d in sorted(dims)] + [(d0, d1) for d0 in sorted(dims) for d1 in sorted(dims)] + [(1, 1, 1)]


@pytest.mark.parametrize("m, n, k", DECODE_SHAPES, ids=str)
def test_scale_decoder_reads_shapes_as_the_op_does(m, n, k):
    """tcgemm._scales decodes every scale shape as the C++ op does: the same shapes are accepted,
    and the reference, which expands scales through the decoder, computes what the op computes
    (ambiguous shapes included, so the order of resolution is the op's)."""
    from tcgemm import _scales

    gen = torch.Generator().manual_seed(m * 10000 + n * 100 + k)
    a, b = _operands(m, n, k, "cpu", gen)

    def rand(shape):
        return (torch.rand(shape, generator=gen) * 1.5 + 0.5) * 0.02

    for shape in _candidate_shapes(m, n, k):
        for operand in ("a", "b"):
            if operand == "a":
                layout = _scales.decode_scale_a(shape, m, k)
            else:
                layout = _scales.decode_scale_b(shape, n, k)
            s = rand(shape)
            sa, sb = (s, torch.ones(1)) if operand == "a" else (torch.ones(m, 1), s)
            if layout is None:
                with pytest.raises(ValueError, match=rf"argument 'scale_{operand}' must have shape"):
                    tcgemm.scaled_gemm(a, b, sa, sb, None, torch.float32)
                continue
            out = tcgemm.scaled_gemm(a, b, sa, sb, None, torch.float32)
            _check(out, a, b, sa, sb, None, torch.float32, f"scale_{operand} {list(shape)} read as {layout}")


def test_scale_b_ambiguity():
    from tcgemm._scales import PER_ROW, decode_scale_b, scale_b_is_ambiguous

    # N = 2, K = 200: 128x128 block scales are [1, 2], the shape of per-channel [1, N].
    assert scale_b_is_ambiguous((1, 2), 2, 200) and decode_scale_b((1, 2), 2, 200) == PER_ROW
    assert not scale_b_is_ambiguous((2, 2), 2, 200)  # the same scales per channel and K block
    assert not scale_b_is_ambiguous((2,), 2, 200)
    assert not scale_b_is_ambiguous((1, 1), 1, 100)  # one element means the same in every layout
    assert not scale_b_is_ambiguous((1, 3), 3, 200)  # per-channel only: two K blocks, not three
    assert not scale_b_is_ambiguous((1, 2), 130, 200)  # 128x128 blocks only (N > 128)


def test_opcheck_cpu():
    gen = torch.Generator().manual_seed(3)
    a, b = _operands(9, 20, 300, "cpu", gen)
    for gran in ("token-channel", "block-block"):
        sa, sb = _scales(gran, 9, 20, 300, "cpu", gen)
        torch.library.opcheck(torch.ops.tcgemm.scaled_gemm.default, (a, b, sa, sb, None, torch.bfloat16, "auto"))


def test_fake_tensor_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(5, 256, dtype=torch.int8)
        b = torch.empty(256, 7, dtype=torch.int8)
        out = tcgemm.scaled_gemm(a, b, torch.empty(5, 2), torch.empty(1, 2), None, torch.float16)
        assert out.shape == (5, 7) and out.dtype == torch.float16


# ---------------------------------------------------------------------------------------------
# GPU: every backend of this GPU that runs the scaled GEMM, forced, and "auto" (the
# ``scaled_backend`` parameter comes from conftest).

GPU_SHAPES = [(1, 1, 1), (7, 13, 200), (33, 130, 300), (129, 257, 1000), (256, 384, 640), (300, 1000, 2048),
              (1000, 520, 4097)]


@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("gran", GRANULARITIES)
def test_gpu_matches_reference(scaled_backend, gran, out_dtype):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{scaled_backend}{gran}{out_dtype}".encode()))
    for i, (m, n, k) in enumerate(GPU_SHAPES):
        a, b = _operands(m, n, k, "cuda", gen, b_layout="weight" if i % 2 == 0 else "rowmajor")
        sa, sb = _scales(gran, m, n, k, "cuda", gen)
        bias = (torch.randn(n, generator=gen) * 4).to("cuda", torch.float16) if i % 3 != 1 else None
        _poison_allocator(m * n, out_dtype, "cuda")
        out = tcgemm.scaled_gemm(a, b, sa, sb, bias, out_dtype, backend=scaled_backend)
        _check(out, a, b, sa, sb, bias, out_dtype, f"{scaled_backend} {gran} {(m, n, k)}")


@pytest.mark.gpu
def test_gpu_decode_shapes(scaled_backend):
    """Few rows against a wide weight (mostly what auto, sm80 and sm90 give the skinny kernel), K tails."""
    gen = torch.Generator().manual_seed(23)
    for m, n, k in [(1, 4096, 4096), (9, 2200, 4100), (32, 4096, 1030), (16, 8192, 640), (12, 8200, 1100)]:
        a, b = _operands(m, n, k, "cuda", gen, b_layout="weight")
        for gran in ("token-channel", "block-block", "block-chanblock"):
            sa, sb = _scales(gran, m, n, k, "cuda", gen)
            bias = torch.randn(n, generator=gen).cuda()
            for out_dtype in (torch.bfloat16, torch.float32):
                _poison_allocator(m * n, out_dtype, "cuda")
                out = tcgemm.scaled_gemm(a, b, sa, sb, bias, out_dtype, backend=scaled_backend)
                _check(out, a, b, sa, sb, bias, out_dtype, f"{scaled_backend} {gran} {(m, n, k)} {out_dtype}")


@pytest.mark.gpu
def test_gpu_per_block_many_tiles(scaled_backend):
    """More output tiles than SMs: the persistent sm90 per-block kernel runs one CTA's K blocks on
    across tile boundaries (its epilogue under the next tile's first block), with odd and even
    counts of K blocks per CTA (3 or 9 per tile, CTAs with one or more tiles); 128x128 weight
    blocks and per-column 1x128 weight blocks (the sm90 config with column factors)."""
    gen = torch.Generator().manual_seed(31)
    for m, n, k in [(1536, 1664, 300), (2100, 2090, 1100)]:
        a, b = _operands(m, n, k, "cuda", gen, b_layout="weight")
        for gran in ("block-block", "block-chanblock"):
            sa, sb = _scales(gran, m, n, k, "cuda", gen)
            bias = torch.randn(n, generator=gen).cuda()
            _poison_allocator(m * n, torch.bfloat16, "cuda")
            out = tcgemm.scaled_gemm(a, b, sa, sb, bias, torch.bfloat16, backend=scaled_backend)
            _check(out, a, b, sa, sb, bias, torch.bfloat16, f"{scaled_backend} {gran} {(m, n, k)}")


@pytest.mark.gpu
def test_gpu_views_and_odd_strides(scaled_backend):
    """Sliced activations, an output row stride TMA cannot describe (N odd), a single row."""
    gen = torch.Generator().manual_seed(11)
    for m, n, k in [(5, 7, 129), (70, 33, 515), (1, 4095, 3000)]:
        big = torch.randint(-127, 128, (m, k + 40), dtype=torch.int8, generator=gen).cuda()
        a = big[:, 8 : 8 + k]  # unaligned base: TMA cannot read it in place
        b = torch.randint(-127, 128, (n, k), dtype=torch.int8, generator=gen).cuda().t()
        for gran in ("token-channel", "block-block", "block-chanblock"):
            sa, sb = _scales(gran, m, n, k, "cuda", gen)
            bias = torch.randn(n, generator=gen).cuda()
            out = tcgemm.scaled_gemm(a, b, sa, sb, bias, torch.bfloat16, backend=scaled_backend)
            _check(out, a, b, sa, sb, bias, torch.bfloat16, f"{scaled_backend} {gran} {(m, n, k)}")


@pytest.mark.gpu
def test_gpu_backends_agree_with_cpu():
    gen = torch.Generator().manual_seed(5)
    a, b = _operands(200, 300, 1500, "cpu", gen)
    for gran in ("token-channel", "block-block"):
        sa, sb = _scales(gran, 200, 300, 1500, "cpu", gen)
        cpu = tcgemm.scaled_gemm(a, b, sa, sb, None, torch.float32)
        for backend in [*tcgemm.backends_for("scaled_gemm", device="cuda"), "auto"]:
            got = tcgemm.scaled_gemm(a.cuda(), b.cuda(), sa.cuda(), sb.cuda(), None, torch.float32, backend=backend)
            torch.testing.assert_close(got.cpu(), cpu, rtol=1e-3, atol=1e-4)  # fp32 sums in another order


@pytest.mark.gpu
def test_gpu_channel_block_weight_scales_per_column(scaled_backend):
    """[N, KB] weight scales: every column of a 128-column block and every K block takes its own
    scale. Ones times ones, scale_b(n, kb) = 2^-(n % 7) * (kb + 1): the exact sum
    128 * sum_kb scale_b(n, kb) is representable, so every backend must return it exactly."""
    m, n, k = 200, 300, 384
    a = torch.ones(m, k, dtype=torch.int8, device="cuda")
    b = torch.ones(n, k, dtype=torch.int8, device="cuda").t()
    cols = torch.arange(n, dtype=torch.float32)
    sb = (torch.exp2(-(cols % 7))[:, None] * torch.arange(1, 4, dtype=torch.float32)[None, :]).cuda()
    sa = torch.ones(m, 3, device="cuda")
    _poison_allocator(m * n, torch.float32, "cuda")
    out = tcgemm.scaled_gemm(a, b, sa, sb, None, torch.float32, backend=scaled_backend)
    expected = (128 * sb.sum(dim=1))[None, :].expand(m, n)
    assert torch.equal(out, expected)


@pytest.mark.gpu
def test_gpu_errors():
    a, b, sa, sb = _args(device="cuda")
    with pytest.raises(ValueError, match=r"argument 'scale_b' must be on the same device"):
        tcgemm.scaled_gemm(a, b, sa, sb.cpu())
    with pytest.raises(ValueError, match=r"argument 'bias' must be on the same device"):
        tcgemm.scaled_gemm(a, b, sa, sb, torch.ones(8))
    with pytest.raises(ValueError, match=r"the scaled GEMM runs on backends auto, cpu, sm80, sm90 and skinny, not 'wmma'"):
        tcgemm.scaled_gemm(a, b, sa, sb, backend="wmma")


@pytest.mark.gpu
def test_gpu_cuda_graph_and_compile():
    gen = torch.Generator().manual_seed(9)
    a, b = _operands(256, 512, 1024, "cuda", gen)
    sa, sb = _scales("token-channel", 256, 512, 1024, "cuda", gen)
    bias = torch.randn(512, generator=gen).cuda()
    eager = tcgemm.scaled_gemm(a, b, sa, sb, bias)

    f = torch.compile(lambda a, b, sa, sb, bias: tcgemm.scaled_gemm(a, b, sa, sb, bias), fullgraph=True)
    torch.testing.assert_close(f(a, b, sa, sb, bias), eager, rtol=0, atol=0)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tcgemm.scaled_gemm(a, b, sa, sb, bias)  # warm-up off the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = tcgemm.scaled_gemm(a, b, sa, sb, bias)
    a2, _ = _operands(256, 512, 1024, "cuda", gen)
    a.copy_(a2)
    g.replay()
    torch.testing.assert_close(static_out, tcgemm.scaled_gemm(a, b, sa, sb, bias), rtol=0, atol=0)

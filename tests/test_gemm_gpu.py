"""Exactness tests of the CUDA backends of tcgemm.

Every test runs once per backend in ``tcgemm.backends_for("gemm", device="cuda")``
plus ``"auto"`` (the ``gemm_backend`` parameter comes from conftest) and compares
bit for bit against the independent int64 CPU reference, wrapped modulo 2**32.
Outputs passed through ``out=`` are poisoned first so unwritten entries fail.
Without CUDA the whole module is collected and skipped.
"""

import pytest
import torch

import tcgemm
from cases import ALPHA_BETA_WRAP, alpha_beta_id, dtype_pair_id

pytestmark = pytest.mark.gpu

DEV = "cuda"

I8 = torch.int8
U8 = torch.uint8
I32 = torch.int32

DTYPE_PAIRS = [(I8, I8), (I8, U8), (U8, I8), (U8, U8)]

MAJOR_LAYOUTS = ("row", "col")
VIEW_LAYOUTS = ("row", "col", "slice", "stride2", "col_slice")
MISALIGNED_LAYOUTS = ("slice", "stride2", "col_slice")
C_LAYOUTS = ("contiguous", "transposed", "slice", "expand_row", "expand_col", "expand_all")

ALPHA_BETA = [(1, 1), (2, -3), (-1, -1), (0, 5), (-7, 0), (123457, -98765)]

# Cycles for torch.cuda._sleep: tens of milliseconds on an H200, far longer
# than it takes the host to launch the GEMM behind it.
STREAM_DELAY_CYCLES = 50_000_000


def nk_id(nk):
    n, k = nk
    return f"N{n}-K{k}"


def empty_out(m, n):
    return torch.empty(m, n, dtype=I32, device=DEV)


def test_available_backends_cuda(gpu_backends):
    assert "wmma" in gpu_backends
    assert "wmma_simple" in gpu_backends
    has_sm80 = torch.cuda.get_device_capability() >= (8, 0)
    assert ("sm80" in gpu_backends) == has_sm80
    assert ("skinny" in gpu_backends) == has_sm80
    assert set(gpu_backends) <= set(tcgemm.BACKENDS) - {"auto", "cpu"}


M_SWEEP_CASES = [
    pytest.param(72, 96, I8, I8, "row", id="N72-K96-i8xi8-row"),
    pytest.param(50, 70, U8, I8, "col", id="N50-K70-u8xi8-bcol"),
]


@pytest.mark.parametrize("n,k,a_dtype,b_dtype,b_layout", M_SWEEP_CASES)
def test_every_m_up_to_128(
    gemm_backend, n, k, a_dtype, b_dtype, b_layout, rng, make_operand, poison, ref_gemm, check_exact
):
    for m in range(1, 129):
        a = make_operand(m, k, a_dtype, "row", DEV, rng)
        b = make_operand(k, n, b_dtype, b_layout, DEV, rng)
        out = poison(empty_out(m, n))
        tcgemm.gemm(a, b, out=out, backend=gemm_backend)
        check_exact(out, ref_gemm(a, b), f"{gemm_backend} M={m} N={n} K={k}")


ODD_M = (1, 7, 17, 33, 100, 127, 255, 513, 1000, 4097)
ODD_NK = [(33, 100), (257, 129), (1000, 1000), (129, 4097)]


@pytest.mark.parametrize("n,k", ODD_NK, ids=[nk_id(nk) for nk in ODD_NK])
@pytest.mark.parametrize("m", ODD_M, ids=[f"M{m}" for m in ODD_M])
def test_odd_sizes(gemm_backend, m, n, k, rng, make_operand, ref_gemm, check_exact):
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, I8, "col", DEV, rng)
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, ref_gemm(a, b), f"{gemm_backend} M={m} N={n} K={k}", device=DEV)


UNALIGNED = (1, 3, 15, 17, 31, 33, 100, 129)


@pytest.mark.parametrize("n", UNALIGNED, ids=[f"N{n}" for n in UNALIGNED])
@pytest.mark.parametrize("k", UNALIGNED, ids=[f"K{k}" for k in UNALIGNED])
def test_unaligned_n_and_k(gemm_backend, k, n, rng, make_operand, ref_gemm, check_exact):
    m = 37
    for b_layout in MAJOR_LAYOUTS:
        a = make_operand(m, k, I8, "row", DEV, rng)
        b = make_operand(k, n, U8, b_layout, DEV, rng)
        got = tcgemm.gemm(a, b, backend=gemm_backend)
        check_exact(got, ref_gemm(a, b), f"{gemm_backend} M={m} N={n} K={k} b={b_layout}")


@pytest.mark.parametrize("shape", [(64, 64, 64), (67, 45, 83)], ids=["aligned", "unaligned"])
@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=dtype_pair_id)
@pytest.mark.parametrize("b_layout", MAJOR_LAYOUTS)
@pytest.mark.parametrize("a_layout", MAJOR_LAYOUTS)
def test_layouts_and_dtypes(
    gemm_backend, a_layout, b_layout, dtypes, shape, rng, make_operand, ref_gemm, check_exact
):
    m, n, k = shape
    a = make_operand(m, k, dtypes[0], a_layout, DEV, rng)
    b = make_operand(k, n, dtypes[1], b_layout, DEV, rng)
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, ref_gemm(a, b), f"{gemm_backend} a={a_layout} b={b_layout}", device=DEV)


@pytest.mark.parametrize("b_layout", VIEW_LAYOUTS)
@pytest.mark.parametrize("a_layout", VIEW_LAYOUTS)
def test_strided_views(gemm_backend, a_layout, b_layout, rng, make_operand, ref_gemm, check_exact):
    m, n, k = 70, 90, 110
    a = make_operand(m, k, U8, a_layout, DEV, rng)
    b = make_operand(k, n, I8, b_layout, DEV, rng)
    for name, operand, layout in (("a", a, a_layout), ("b", b, b_layout)):
        if layout in MISALIGNED_LAYOUTS:
            assert operand.data_ptr() % 16 != 0, f"{name} view should break 16-byte alignment"
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, ref_gemm(a, b), f"{gemm_backend} a={a_layout} b={b_layout}")


@pytest.mark.parametrize("alpha_beta", ALPHA_BETA, ids=alpha_beta_id)
@pytest.mark.parametrize("c_layout", C_LAYOUTS)
def test_alpha_beta_c(
    gemm_backend, c_layout, alpha_beta, rng, make_operand, make_c, ref_gemm, check_exact
):
    alpha, beta = alpha_beta
    m, n, k = 130, 70, 90
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, U8, "col", DEV, rng)
    c = make_c(m, n, c_layout, DEV, rng)
    inputs_before = [t.clone() for t in (a, b, c)]
    got = tcgemm.gemm(a, b, c, alpha, beta, backend=gemm_backend)
    check_exact(got, ref_gemm(a, b, c, alpha, beta), f"{gemm_backend} c={c_layout}", device=DEV)
    for before, after in zip(inputs_before, (a, b, c)):
        assert torch.equal(before, after), "an input operand was modified"


def test_out_is_written_and_returned(gemm_backend, rng, make_operand, poison, ref_gemm, check_exact):
    m, n, k = 65, 47, 129
    out = empty_out(m, n)
    for call in range(3):
        a = make_operand(m, k, I8, "row", DEV, rng)
        b = make_operand(k, n, I8, "col", DEV, rng)
        poison(out)
        result = tcgemm.gemm(a, b, out=out, backend=gemm_backend)
        assert result.data_ptr() == out.data_ptr(), "gemm(out=) must return out"
        check_exact(out, ref_gemm(a, b), f"{gemm_backend} gemm call {call}")
        poison(out)
        result = tcgemm.int8_gemm(a, b, out=out, backend=gemm_backend)
        assert result.data_ptr() == out.data_ptr(), "int8_gemm(out=) must return out"
        check_exact(out, ref_gemm(a, b), f"{gemm_backend} int8_gemm call {call}")


@pytest.mark.parametrize("c_layout", ("contiguous", "transposed", "expand_row"))
def test_out_with_c(
    gemm_backend, c_layout, rng, make_operand, make_c, poison, ref_gemm, check_exact
):
    alpha, beta = 3, -2
    m, n, k = 100, 33, 70
    a = make_operand(m, k, U8, "row", DEV, rng)
    b = make_operand(k, n, U8, "row", DEV, rng)
    c = make_c(m, n, c_layout, DEV, rng)
    out = poison(empty_out(m, n))
    result = tcgemm.gemm(a, b, c, alpha, beta, out=out, backend=gemm_backend)
    assert result.data_ptr() == out.data_ptr()
    check_exact(out, ref_gemm(a, b, c, alpha, beta), f"{gemm_backend} c={c_layout}")


@pytest.mark.parametrize("alpha_beta", [(1, 1), (2, -3), (-5, 7)], ids=alpha_beta_id)
def test_out_is_c(gemm_backend, alpha_beta, rng, make_operand, make_int32, ref_gemm, check_exact):
    alpha, beta = alpha_beta
    m, n, k = 127, 72, 96
    a = make_operand(m, k, I8, "col", DEV, rng)
    b = make_operand(k, n, U8, "row", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    expected = ref_gemm(a, b, c.clone(), alpha, beta)
    result = tcgemm.gemm(a, b, c, alpha, beta, out=c, backend=gemm_backend)
    assert result.data_ptr() == c.data_ptr()
    check_exact(c, expected, f"{gemm_backend} in-place D = alpha*AB + beta*D")


# Few output tiles and long K: the sm80 backend splits K across blocks that add their partial
# sums into D with atomics (after D is filled with beta * C); other backends take these as is.
SPLIT_K_CASES = [
    pytest.param(1, 4096, 4096, 1, 0, id="M1-N4096-K4096"),
    pytest.param(7, 300, 5001, 3, -2, id="M7-N300-K5001-alpha3-beta-2"),
    pytest.param(64, 200, 20000, -1, 1, id="M64-N200-K20000-alpha-1-beta1"),
]


@pytest.mark.parametrize("m,n,k,alpha,beta", SPLIT_K_CASES)
def test_small_m_long_k(gemm_backend, m, n, k, alpha, beta, rng, make_operand, make_int32, poison, ref_gemm, check_exact):
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, U8, "col", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    expected = ref_gemm(a, b, c, alpha, beta)
    out = poison(torch.empty(m, n, dtype=I32, device=DEV))
    check_exact(tcgemm.gemm(a, b, c, alpha, beta, out=out, backend=gemm_backend), expected, f"{gemm_backend} out=")
    check_exact(tcgemm.gemm(a, b, c, alpha, beta, out=c, backend=gemm_backend), expected, f"{gemm_backend} out is c")


# Decode-sized problems (few rows, a wide B, long K): auto, sm80 and sm90 hand these to the
# skinny kernel; the K tails (4100, 4111) and 17..32 rows (two m16 tiles) are its edges. At 9-16
# rows and N >= ~7.9K its blocks are 32 columns wide (16x8192, 12x8200 with a partial last block:
# through sm80 and the forced skinny backend; auto and sm90 give them to the sm90 tiles, with A
# boxes of 16 rows).
DECODE_CASES = [(1, 4096, 4096), (7, 4100, 4100), (16, 2304, 8192), (17, 4096, 4111), (32, 6000, 1024),
                (16, 8192, 640), (12, 8200, 1100)]


@pytest.mark.parametrize("m,n,k", DECODE_CASES, ids=lambda v: str(v))
def test_decode_shapes(gemm_backend, m, n, k, rng, make_operand, make_int32, poison, ref_gemm, check_exact):
    for da, db in [(I8, I8), (U8, I8)]:
        a = make_operand(m, k, da, "row", DEV, rng)
        b = make_operand(k, n, db, "col", DEV, rng)
        c = make_int32(m, n, DEV, rng)
        expected = ref_gemm(a, b, c, 3, -2)
        out = poison(empty_out(m, n))
        got = tcgemm.gemm(a, b, c, 3, -2, out=out, backend=gemm_backend)
        check_exact(got, expected, f"{gemm_backend} {m}x{n}x{k} {da} x {db}")


# Fewer rows than the tile: the sm90 kernels load boxes of M's rows (rounded up to 8) and keep the
# tile's other rows zero in every ring slot; K long enough that each slot is refilled many times.
@pytest.mark.parametrize("m,n,k", [(5, 1000, 4000), (40, 3000, 2200), (100, 520, 3000)], ids=lambda v: str(v))
def test_rows_short_of_the_tile(gemm_backend, m, n, k, rng, make_operand, poison, ref_gemm, check_exact):
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, I8, "col", DEV, rng)
    out = poison(empty_out(m, n))
    check_exact(tcgemm.gemm(a, b, out=out, backend=gemm_backend), ref_gemm(a, b), f"{gemm_backend} {m}x{n}x{k}")


def test_k_zero_gives_zeros(gemm_backend, rng, make_operand, poison, check_exact):
    m, n = 40, 24
    a = make_operand(m, 0, I8, "row", DEV, rng)
    b = make_operand(0, n, U8, "row", DEV, rng)
    zeros = torch.zeros(m, n, dtype=I32)
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, zeros, gemm_backend, expect_nonzero=False, device=DEV)
    out = poison(empty_out(m, n))
    tcgemm.int8_gemm(a, b, out=out, backend=gemm_backend)
    check_exact(out, zeros, "poisoned out must be zero-filled", expect_nonzero=False)


def test_k_zero_with_c(gemm_backend, rng, make_operand, make_int32, poison, wrap_int32, check_exact):
    m, n, alpha, beta = 33, 17, 5, -3
    a = make_operand(m, 0, I8, "row", DEV, rng)
    b = make_operand(0, n, I8, "col", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    expected = wrap_int32(beta * c.cpu().long())
    got = tcgemm.gemm(a, b, c, alpha, beta, backend=gemm_backend)
    check_exact(got, expected, "beta*C", device=DEV)
    out = poison(empty_out(m, n))
    tcgemm.gemm(a, b, c, alpha, beta, out=out, backend=gemm_backend)
    check_exact(out, expected, "beta*C into out")


@pytest.mark.parametrize("m,n", [(0, 5), (5, 0), (0, 0)], ids=["M0", "N0", "M0-N0"])
def test_empty_m_or_n(gemm_backend, m, n, rng, make_operand, check_exact):
    k = 19
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, U8, "row", DEV, rng)
    empty = torch.empty(m, n, dtype=I32)
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, empty, gemm_backend, expect_nonzero=False, device=DEV)
    out = empty_out(m, n)
    result = tcgemm.int8_gemm(a, b, out=out, backend=gemm_backend)
    assert result.shape == (m, n) and result.dtype == I32


EXTREME_CASES = [
    pytest.param(I8, -128, I8, -128, id="i8min-x-i8min"),
    pytest.param(I8, 127, I8, -128, id="i8max-x-i8min"),
    pytest.param(I8, 127, I8, 127, id="i8max-x-i8max"),
    pytest.param(I8, -128, U8, 255, id="i8min-x-u8max"),
    pytest.param(U8, 255, I8, 127, id="u8max-x-i8max"),
]


@pytest.mark.slow
@pytest.mark.parametrize("b_layout", MAJOR_LAYOUTS)
@pytest.mark.parametrize("a_dtype,a_value,b_dtype,b_value", EXTREME_CASES)
def test_extreme_values_large_k(
    gemm_backend, a_dtype, a_value, b_dtype, b_value, b_layout, check_exact
):
    m = n = 64
    k = 65536
    a = torch.full((m, k), a_value, dtype=a_dtype, device=DEV)
    b = torch.full((k, n), b_value, dtype=b_dtype, device=DEV)
    if b_layout == "col":
        b = b.t().contiguous().t()
    exact = a_value * b_value * k
    assert -(2**31) <= exact < 2**31, "this case must not overflow"
    expected = torch.full((m, n), exact, dtype=I32)
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, expected, f"{gemm_backend} K={k} b={b_layout}")


WRAP_CASES = [
    pytest.param(U8, 255, U8, 255, 40000, id="u8max-x-u8max-K40000"),
    pytest.param(U8, 255, U8, 255, 65536, id="u8max-x-u8max-K65536"),
    pytest.param(U8, 255, I8, -128, 70000, id="u8max-x-i8min-K70000"),
    pytest.param(I8, -128, I8, -128, 131073, id="i8min-x-i8min-K131073"),
]


@pytest.mark.parametrize("a_dtype,a_value,b_dtype,b_value,k", WRAP_CASES)
def test_accumulator_wraps_modulo_2_32(
    gemm_backend, a_dtype, a_value, b_dtype, b_value, k, wrap_int32, check_exact
):
    m, n = 32, 24
    a = torch.full((m, k), a_value, dtype=a_dtype, device=DEV)
    b = torch.full((n, k), b_value, dtype=b_dtype, device=DEV).t()
    exact = a_value * b_value * k
    assert not -(2**31) <= exact < 2**31, "this case must overflow int32"
    expected = torch.full((m, n), wrap_int32(exact), dtype=I32)
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, expected, f"{gemm_backend} exact={exact}")


def test_random_accumulator_wraps(gemm_backend, rng, make_operand, ref_gemm, check_exact):
    m, n, k = 37, 45, 40000
    a = make_operand(m, k, U8, "row", DEV, rng, low=240)
    b = make_operand(k, n, U8, "col", DEV, rng, low=240)
    assert (a.cpu().long() @ b.cpu().long()).min() >= 2**31, "every entry must overflow int32"
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, ref_gemm(a, b), gemm_backend)



@pytest.mark.parametrize("alpha_beta", ALPHA_BETA_WRAP, ids=alpha_beta_id)
def test_alpha_beta_wrap(
    gemm_backend, alpha_beta, rng, make_operand, make_int32, ref_gemm, check_exact
):
    alpha, beta = alpha_beta
    m, n, k = 80, 48, 200
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, I8, "col", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    unwrapped = alpha * (a.cpu().long() @ b.cpu().long()) + beta * c.cpu().long()
    assert unwrapped.abs().max() >= 2**31, "alpha/beta scaling must overflow int32"
    got = tcgemm.gemm(a, b, c, alpha, beta, backend=gemm_backend)
    check_exact(got, ref_gemm(a, b, c, alpha, beta), f"{gemm_backend} alpha={alpha} beta={beta}")


def test_non_default_stream(
    gemm_backend, rng, make_operand, make_int32, poison, ref_gemm, check_exact
):
    """The GEMM must run on the current stream, ordered after its producers.

    The side stream is stalled with ``torch.cuda._sleep`` before the inputs are
    filled on it, so a kernel launched on any other stream would read them
    before they are written and produce a mismatch.
    """
    alpha, beta = 3, -2
    m, n, k = 200, 72, 96
    a_src = make_operand(m, k, I8, "row", DEV, rng)
    b_src = make_operand(k, n, U8, "col", DEV, rng)
    c_src = make_int32(m, n, DEV, rng)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(STREAM_DELAY_CYCLES)
        a = torch.empty_like(a_src).copy_(a_src)
        b = torch.empty_like(b_src).copy_(b_src)
        c = torch.empty_like(c_src).copy_(c_src)
        d = tcgemm.gemm(a, b, c, alpha, beta, backend=gemm_backend)
        out = poison(empty_out(m, n))
        tcgemm.int8_gemm(a, b, out=out, backend=gemm_backend)
    stream.synchronize()
    check_exact(d, ref_gemm(a_src, b_src, c_src, alpha, beta), f"{gemm_backend} gemm on side stream")
    check_exact(out, ref_gemm(a_src, b_src), f"{gemm_backend} int8_gemm on side stream")


def test_cuda_graph_replay(
    gemm_backend, rng, make_operand, make_int32, poison, ref_gemm, check_exact
):
    alpha, beta = -3, 2
    m, n, k = 96, 80, 112
    static_a = make_operand(m, k, I8, "row", DEV, rng)
    static_b = make_operand(k, n, U8, "col", DEV, rng)
    static_c = make_int32(m, n, DEV, rng)
    static_out = empty_out(m, n)

    def step():
        d = tcgemm.gemm(static_a, static_b, static_c, alpha, beta, backend=gemm_backend)
        tcgemm.int8_gemm(static_a, static_b, out=static_out, backend=gemm_backend)
        return d

    warmup = torch.cuda.Stream()
    warmup.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warmup):
        step()
    torch.cuda.current_stream().wait_stream(warmup)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_d = step()

    for replay in range(2):
        new_a = make_operand(m, k, I8, "row", DEV, rng)
        new_b = make_operand(k, n, U8, "row", DEV, rng)
        new_c = make_int32(m, n, DEV, rng)
        static_a.copy_(new_a)
        static_b.copy_(new_b)
        static_c.copy_(new_c)
        poison(static_d)
        poison(static_out)
        graph.replay()
        torch.cuda.synchronize()
        context = f"{gemm_backend} replay {replay}"
        check_exact(static_d, ref_gemm(new_a, new_b, new_c, alpha, beta), f"{context} gemm")
        check_exact(static_out, ref_gemm(new_a, new_b), f"{context} int8_gemm(out=)")


def make_compile_target(backend):
    def fn(a, b, c):
        product = tcgemm.int8_gemm(a, b, backend=backend)
        scaled = tcgemm.gemm(a, b, c, 3, -2, backend=backend)
        return product, scaled

    return fn


@pytest.mark.slow
def test_torch_compile_fullgraph(gemm_backend, rng, make_operand, make_int32, ref_gemm, check_exact):
    torch._dynamo.reset()
    compiled = torch.compile(make_compile_target(gemm_backend), fullgraph=True)
    m, n, k = 77, 64, 96
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, U8, "col", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    product, scaled = compiled(a, b, c)
    check_exact(product, ref_gemm(a, b), f"{gemm_backend} compiled int8_gemm")
    check_exact(scaled, ref_gemm(a, b, c, 3, -2), f"{gemm_backend} compiled gemm")


@pytest.mark.slow
def test_torch_compile_dynamic(gemm_backend, rng, make_operand, make_int32, ref_gemm, check_exact):
    torch._dynamo.reset()
    compiled = torch.compile(make_compile_target(gemm_backend), fullgraph=True, dynamic=True)
    n, k = 48, 80
    b = make_operand(k, n, I8, "col", DEV, rng)
    for m in (37, 129):
        a = make_operand(m, k, I8, "row", DEV, rng)
        c = make_int32(m, n, DEV, rng)
        product, scaled = compiled(a, b, c)
        check_exact(product, ref_gemm(a, b), f"{gemm_backend} M={m} compiled int8_gemm")
        check_exact(scaled, ref_gemm(a, b, c, 3, -2), f"{gemm_backend} M={m} compiled gemm")


@pytest.mark.slow
def test_torch_compile_out(gemm_backend, rng, make_operand, make_int32, poison, ref_gemm, check_exact):
    torch._dynamo.reset()

    def fn(a, b, c, out):
        tcgemm.int8_gemm(a, b, out=out, backend=gemm_backend)
        return tcgemm.gemm(a, b, c, -1, 2, out=c, backend=gemm_backend)

    compiled = torch.compile(fn, fullgraph=True)
    m, n, k = 50, 40, 70
    a = make_operand(m, k, U8, "row", DEV, rng)
    b = make_operand(k, n, I8, "row", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    expected_d = ref_gemm(a, b, c.clone(), -1, 2)
    out = poison(empty_out(m, n))
    d = compiled(a, b, c, out)
    check_exact(out, ref_gemm(a, b), f"{gemm_backend} compiled int8_gemm(out=)")
    check_exact(c, expected_d, f"{gemm_backend} compiled in-place gemm(out=c)")
    check_exact(d, expected_d, f"{gemm_backend} value returned by compiled gemm(out=c)")


LARGE_SHAPES = [(1024, 1024, 1024), (2048, 4096, 512)]


@pytest.mark.slow
@pytest.mark.parametrize("m,n,k", LARGE_SHAPES, ids=[f"M{m}-N{n}-K{k}" for m, n, k in LARGE_SHAPES])
def test_large_shapes(gemm_backend, m, n, k, rng, make_operand, ref_gemm, check_exact):
    a = make_operand(m, k, U8, "row", DEV, rng)
    b = make_operand(k, n, I8, "col", DEV, rng)
    got = tcgemm.gemm(a, b, backend=gemm_backend)
    check_exact(got, ref_gemm(a, b), f"{gemm_backend} M={m} N={n} K={k}", device=DEV)


def test_opcheck_gemm(gemm_backend, rng, make_operand, make_int32):
    m, n, k = 40, 24, 72
    a = make_operand(m, k, I8, "row", DEV, rng)
    b = make_operand(k, n, U8, "col", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    torch.library.opcheck(torch.ops.tcgemm.gemm.default, (a, b, None, 1, 0, gemm_backend))
    torch.library.opcheck(torch.ops.tcgemm.gemm.default, (a, b, c, 3, -2, gemm_backend))


def test_opcheck_gemm_out(gemm_backend, rng, make_operand, make_int32):
    m, n, k = 40, 24, 72
    a = make_operand(m, k, U8, "row", DEV, rng)
    b = make_operand(k, n, I8, "row", DEV, rng)
    c = make_int32(m, n, DEV, rng)
    out = empty_out(m, n)
    torch.library.opcheck(
        torch.ops.tcgemm.gemm_out.default, (a, b, c, 3, -2, gemm_backend), {"out": out}
    )
    torch.library.opcheck(
        torch.ops.tcgemm.gemm_out.default, (a, b, None, 1, 0, gemm_backend), {"out": out}
    )

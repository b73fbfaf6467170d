"""Exactness tests of the CPU path of tcgemm (``backend="cpu"`` and ``"auto"``).

Every result is compared bit for bit against the independent int64 reference
from conftest, wrapped modulo 2**32. Shapes stay small so the module runs in a
few seconds on a CI runner without a GPU.
"""

import pytest
import torch

import tcgemm
from cases import ALPHA_BETA_WRAP, alpha_beta_id, dtype_id, dtype_pair_id

I8 = torch.int8
U8 = torch.uint8
I32 = torch.int32

BACKENDS = ("cpu", "auto")

ODD_SHAPES = [
    (1, 1, 1),
    (7, 13, 5),
    (17, 33, 100),
    (33, 7, 255),
    (100, 127, 513),
    (64, 64, 64),
    (3, 300, 2),
    (129, 1, 17),
]

DTYPE_PAIRS = [(I8, I8), (I8, U8), (U8, I8), (U8, U8)]

MAJOR_LAYOUTS = ("row", "col")
VIEW_LAYOUTS = ("row", "col", "slice", "stride2", "col_slice")
C_LAYOUTS = ("contiguous", "transposed", "slice", "expand_row", "expand_col", "expand_all")

ALPHA_BETA = [(1, 1), (2, -3), (-1, -1), (0, 5), (-7, 0), (123457, -98765)]


def shape_id(shape):
    m, n, k = shape
    return f"M{m}-N{n}-K{k}"


def test_available_backends_cpu():
    assert tcgemm.available_backends("cpu") == ["cpu"]


@pytest.mark.parametrize("m,n,k", ODD_SHAPES, ids=[shape_id(s) for s in ODD_SHAPES])
@pytest.mark.parametrize("backend", BACKENDS)
def test_odd_shapes(backend, m, n, k, rng, make_operand, ref_gemm, check_exact):
    a = make_operand(m, k, I8, "row", "cpu", rng)
    b = make_operand(k, n, I8, "row", "cpu", rng)
    got = tcgemm.gemm(a, b, backend=backend)
    check_exact(got, ref_gemm(a, b), f"{backend} M={m} N={n} K={k}", device="cpu")


@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=dtype_pair_id)
@pytest.mark.parametrize("b_layout", MAJOR_LAYOUTS)
@pytest.mark.parametrize("a_layout", MAJOR_LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_layouts_and_dtypes(
    backend, a_layout, b_layout, dtypes, rng, make_operand, ref_gemm, check_exact
):
    m, n, k = 19, 23, 37
    a = make_operand(m, k, dtypes[0], a_layout, "cpu", rng)
    b = make_operand(k, n, dtypes[1], b_layout, "cpu", rng)
    got = tcgemm.gemm(a, b, backend=backend)
    check_exact(got, ref_gemm(a, b), f"{backend} a={a_layout} b={b_layout}")


@pytest.mark.parametrize("b_layout", VIEW_LAYOUTS)
@pytest.mark.parametrize("a_layout", VIEW_LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_views(backend, a_layout, b_layout, rng, make_operand, ref_gemm, check_exact):
    m, n, k = 21, 18, 45
    a = make_operand(m, k, U8, a_layout, "cpu", rng)
    b = make_operand(k, n, I8, b_layout, "cpu", rng)
    got = tcgemm.gemm(a, b, backend=backend)
    check_exact(got, ref_gemm(a, b), f"{backend} a={a_layout} b={b_layout}")


@pytest.mark.parametrize("alpha_beta", ALPHA_BETA, ids=alpha_beta_id)
@pytest.mark.parametrize("c_layout", C_LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_alpha_beta_c(
    backend, c_layout, alpha_beta, rng, make_operand, make_c, ref_gemm, check_exact
):
    alpha, beta = alpha_beta
    m, n, k = 13, 29, 41
    a = make_operand(m, k, I8, "row", "cpu", rng)
    b = make_operand(k, n, U8, "col", "cpu", rng)
    c = make_c(m, n, c_layout, "cpu", rng)
    inputs_before = [t.clone() for t in (a, b, c)]
    got = tcgemm.gemm(a, b, c, alpha, beta, backend=backend)
    check_exact(got, ref_gemm(a, b, c, alpha, beta), f"{backend} c={c_layout}")
    for before, after in zip(inputs_before, (a, b, c)):
        assert torch.equal(before, after), "an input operand was modified"


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_is_written_and_returned(backend, rng, make_operand, poison, ref_gemm, check_exact):
    m, n, k = 9, 31, 70
    out = torch.empty(m, n, dtype=I32)
    for call in range(3):
        a = make_operand(m, k, I8, "row", "cpu", rng)
        b = make_operand(k, n, I8, "col", "cpu", rng)
        poison(out)
        result = tcgemm.gemm(a, b, out=out, backend=backend)
        assert result.data_ptr() == out.data_ptr(), "gemm(out=) must return out"
        check_exact(out, ref_gemm(a, b), f"{backend} call {call}")


@pytest.mark.parametrize("alpha_beta", [(3, -2), (-1, 1)], ids=alpha_beta_id)
@pytest.mark.parametrize("backend", BACKENDS)
def test_out_with_c(
    backend, alpha_beta, rng, make_operand, make_int32, poison, ref_gemm, check_exact
):
    alpha, beta = alpha_beta
    m, n, k = 17, 5, 33
    a = make_operand(m, k, U8, "row", "cpu", rng)
    b = make_operand(k, n, U8, "row", "cpu", rng)
    c = make_int32(m, n, "cpu", rng)
    out = poison(torch.empty(m, n, dtype=I32))
    result = tcgemm.gemm(a, b, c, alpha, beta, out=out, backend=backend)
    assert result.data_ptr() == out.data_ptr()
    check_exact(out, ref_gemm(a, b, c, alpha, beta), backend)


@pytest.mark.parametrize("alpha_beta", [(1, 1), (2, -3), (-5, 7)], ids=alpha_beta_id)
@pytest.mark.parametrize("backend", BACKENDS)
def test_out_is_c(backend, alpha_beta, rng, make_operand, make_int32, ref_gemm, check_exact):
    alpha, beta = alpha_beta
    m, n, k = 27, 14, 51
    a = make_operand(m, k, I8, "col", "cpu", rng)
    b = make_operand(k, n, U8, "row", "cpu", rng)
    c = make_int32(m, n, "cpu", rng)
    expected = ref_gemm(a, b, c.clone(), alpha, beta)
    result = tcgemm.gemm(a, b, c, alpha, beta, out=c, backend=backend)
    assert result.data_ptr() == c.data_ptr()
    check_exact(c, expected, f"{backend} in-place D = alpha*AB + beta*D")


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_gemm_matches_gemm(backend, rng, make_operand, poison, ref_gemm, check_exact):
    m, n, k = 11, 40, 77
    for a_dtype, b_dtype in DTYPE_PAIRS:
        context = f"{backend} {dtype_id(a_dtype)}x{dtype_id(b_dtype)}"
        a = make_operand(m, k, a_dtype, "row", "cpu", rng)
        b = make_operand(k, n, b_dtype, "col", "cpu", rng)
        expected = ref_gemm(a, b)
        via_gemm = tcgemm.gemm(a, b, backend=backend)
        via_int8_gemm = tcgemm.int8_gemm(a, b, backend=backend)
        check_exact(via_int8_gemm, expected, context)
        assert torch.equal(via_int8_gemm, via_gemm), context
        out = poison(torch.empty(m, n, dtype=I32))
        result = tcgemm.int8_gemm(a, b, out=out, backend=backend)
        assert result.data_ptr() == out.data_ptr()
        check_exact(out, expected, f"{context} out=")


def test_auto_is_default(rng, make_operand, ref_gemm, check_exact):
    a = make_operand(6, 10, I8, "row", "cpu", rng)
    b = make_operand(10, 8, U8, "col", "cpu", rng)
    check_exact(tcgemm.gemm(a, b), ref_gemm(a, b))
    check_exact(tcgemm.int8_gemm(a, b), ref_gemm(a, b))


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_zero_gives_zeros(backend, rng, make_operand, poison, check_exact):
    m, n = 6, 9
    a = make_operand(m, 0, I8, "row", "cpu", rng)
    b = make_operand(0, n, U8, "row", "cpu", rng)
    zeros = torch.zeros(m, n, dtype=I32)
    check_exact(tcgemm.gemm(a, b, backend=backend), zeros, expect_nonzero=False)
    check_exact(tcgemm.int8_gemm(a, b, backend=backend), zeros, expect_nonzero=False)
    out = poison(torch.empty(m, n, dtype=I32))
    tcgemm.gemm(a, b, out=out, backend=backend)
    check_exact(out, zeros, "poisoned out must be zero-filled", expect_nonzero=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_k_zero_with_c(backend, rng, make_operand, make_int32, poison, wrap_int32, check_exact):
    m, n, alpha, beta = 7, 4, 5, -3
    a = make_operand(m, 0, I8, "row", "cpu", rng)
    b = make_operand(0, n, I8, "col", "cpu", rng)
    c = make_int32(m, n, "cpu", rng)
    expected = wrap_int32(beta * c.long())
    check_exact(tcgemm.gemm(a, b, c, alpha, beta, backend=backend), expected, "beta*C")
    out = poison(torch.empty(m, n, dtype=I32))
    tcgemm.gemm(a, b, c, alpha, beta, out=out, backend=backend)
    check_exact(out, expected, "beta*C into out")


@pytest.mark.parametrize("m,n", [(0, 5), (5, 0), (0, 0)], ids=["M0", "N0", "M0-N0"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_m_or_n(backend, m, n, rng, make_operand, check_exact):
    k = 7
    a = make_operand(m, k, I8, "row", "cpu", rng)
    b = make_operand(k, n, U8, "row", "cpu", rng)
    empty = torch.empty(m, n, dtype=I32)
    check_exact(tcgemm.gemm(a, b, backend=backend), empty, expect_nonzero=False, device="cpu")
    check_exact(tcgemm.int8_gemm(a, b, backend=backend), empty, expect_nonzero=False)
    out = torch.empty(m, n, dtype=I32)
    result = tcgemm.gemm(a, b, out=out, backend=backend)
    assert result.shape == (m, n) and result.dtype == I32


EXTREME_CASES = [
    pytest.param(I8, -128, I8, -128, id="i8min-x-i8min"),
    pytest.param(I8, 127, I8, -128, id="i8max-x-i8min"),
    pytest.param(I8, -128, I8, 127, id="i8min-x-i8max"),
    pytest.param(I8, 127, I8, 127, id="i8max-x-i8max"),
    pytest.param(U8, 255, U8, 255, id="u8max-x-u8max"),
    pytest.param(U8, 255, I8, -128, id="u8max-x-i8min"),
    pytest.param(I8, -128, U8, 255, id="i8min-x-u8max"),
]


@pytest.mark.parametrize("a_dtype,a_value,b_dtype,b_value", EXTREME_CASES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_extreme_values(backend, a_dtype, a_value, b_dtype, b_value, check_exact):
    m, n, k = 3, 5, 4096
    a = torch.full((m, k), a_value, dtype=a_dtype)
    b = torch.full((n, k), b_value, dtype=b_dtype).t()
    exact = a_value * b_value * k
    assert -(2**31) <= exact < 2**31, "this case must not overflow"
    expected = torch.full((m, n), exact, dtype=I32)
    check_exact(tcgemm.gemm(a, b, backend=backend), expected, f"{backend} K={k}")


WRAP_CASES = [
    pytest.param(U8, 255, U8, 255, 40000, id="u8max-x-u8max-K40000"),
    pytest.param(U8, 255, I8, -128, 70000, id="u8max-x-i8min-K70000"),
    pytest.param(I8, -128, I8, -128, 131073, id="i8min-x-i8min-K131073"),
]


@pytest.mark.parametrize("a_dtype,a_value,b_dtype,b_value,k", WRAP_CASES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulator_wraps_modulo_2_32(
    backend, a_dtype, a_value, b_dtype, b_value, k, wrap_int32, check_exact
):
    m, n = 2, 3
    a = torch.full((m, k), a_value, dtype=a_dtype)
    b = torch.full((k, n), b_value, dtype=b_dtype)
    exact = a_value * b_value * k
    assert not -(2**31) <= exact < 2**31, "this case must overflow int32"
    expected = torch.full((m, n), wrap_int32(exact), dtype=I32)
    check_exact(tcgemm.gemm(a, b, backend=backend), expected, f"{backend} exact={exact}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_accumulator_wraps(backend, rng, make_operand, ref_gemm, check_exact):
    m, n, k = 4, 6, 40000
    a = make_operand(m, k, U8, "row", "cpu", rng, low=240)
    b = make_operand(k, n, U8, "col", "cpu", rng, low=240)
    assert (a.long() @ b.long()).min() >= 2**31, "every entry must overflow int32"
    check_exact(tcgemm.gemm(a, b, backend=backend), ref_gemm(a, b), backend)



@pytest.mark.parametrize("alpha_beta", ALPHA_BETA_WRAP, ids=alpha_beta_id)
@pytest.mark.parametrize("backend", BACKENDS)
def test_alpha_beta_wrap(
    backend, alpha_beta, rng, make_operand, make_int32, ref_gemm, check_exact
):
    alpha, beta = alpha_beta
    m, n, k = 8, 12, 50
    a = make_operand(m, k, I8, "row", "cpu", rng)
    b = make_operand(k, n, I8, "row", "cpu", rng)
    c = make_int32(m, n, "cpu", rng)
    unwrapped = alpha * (a.long() @ b.long()) + beta * c.long()
    assert unwrapped.abs().max() >= 2**31, "alpha/beta scaling must overflow int32"
    got = tcgemm.gemm(a, b, c, alpha, beta, backend=backend)
    check_exact(got, ref_gemm(a, b, c, alpha, beta), f"{backend} alpha={alpha} beta={beta}")

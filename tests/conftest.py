"""Shared helpers and fixtures for the tcgemm GEMM tests.

The reference implementation here is deliberately independent of the library:
it multiplies in int64 on the CPU and wraps the result modulo 2**32 exactly as
the int32 two's-complement contract of ``tcgemm.gemm`` requires.

Helpers are handed to tests through fixtures (rather than ``from conftest
import ...``) so the tests work under every pytest import mode. This file is also
the one place that knows whether a CUDA device is present: tests that need one
are marked ``gpu`` and skipped here without it.
"""

import zlib

import pytest
import torch

INT32_SPAN = 2**32
INT32_MIN = -(2**31)

SENTINEL = -1234567

VALUE_RANGE = {
    torch.int8: (-128, 128),
    torch.uint8: (0, 256),
}

# The reason every test marked ``gpu`` (itself, or through a parameter such as the "cuda"
# device) is skipped on a machine without a CUDA device.
NO_CUDA_REASON = "needs a CUDA device"

DEVICES = ("cpu", pytest.param("cuda", marks=pytest.mark.gpu))

# Fixtures that run a test once per CUDA backend whose kernels run an op, then once with "auto".
BACKEND_FIXTURES = {"gemm_backend": "gemm", "scaled_backend": "scaled_gemm"}


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: test needs a CUDA device")
    config.addinivalue_line(
        "markers", "slow: comparatively expensive case (still runs by default)"
    )


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=NO_CUDA_REASON)
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def cuda_backends(op):
    """The CUDA backends whose kernels run ``op``, best first: ``tcgemm.backends_for`` on this
    GPU. Without a GPU, every GPU backend of the library that runs ``op``: names for the ids of
    tests that are skipped."""
    import tcgemm

    if torch.cuda.is_available():
        return tcgemm.backends_for(op, device="cuda")
    host = {"auto", *tcgemm.available_backends("cpu")}
    return [b for b in tcgemm.BACKENDS if b not in host and tcgemm.supports(b, op)]


def pytest_generate_tests(metafunc):
    for fixture, op in BACKEND_FIXTURES.items():
        if fixture in metafunc.fixturenames:
            backends = [*cuda_backends(op), "auto"]
            metafunc.parametrize(fixture, [pytest.param(b, marks=pytest.mark.gpu) for b in backends])


@pytest.fixture(params=DEVICES)
def device(request):
    """Runs a test on the CPU and on CUDA (marked ``gpu``); a test's own parametrization of
    ``device`` takes precedence."""
    return request.param


def wrap_int32(x):
    """Wrap an int64 tensor (or Python int) to int32 two's complement."""
    if isinstance(x, int):
        return (x - INT32_MIN) % INT32_SPAN + INT32_MIN
    return ((x.long() - INT32_MIN) % INT32_SPAN + INT32_MIN).to(torch.int32)


def ref_gemm(a, b, c=None, alpha=1, beta=0):
    """Exact D = alpha * (a @ b) + beta * c with int32 wrap-around semantics.

    The product is formed in int64 on the CPU (exact: |a*b| <= 2**16 and
    K < 2**40 in every test), reduced modulo 2**32 first so that the alpha and
    beta terms cannot overflow int64, then wrapped to int32.
    """
    product = a.cpu().long() @ b.cpu().long()
    result = wrap_int32(alpha) * wrap_int32(product).long()
    if c is not None:
        result = result + wrap_int32(beta) * c.cpu().long()
    return wrap_int32(result)


def make_operand(rows, cols, dtype, layout, device, generator, low=None, high=None):
    """Random [rows, cols] int8/uint8 operand with the requested memory layout.

    Values cover the full range of ``dtype`` unless ``low``/``high`` narrow it
    (``high`` exclusive). Layouts:

    * ``row``: contiguous (row-major).
    * ``col``: column-major, the transpose of a contiguous [cols, rows].
    * ``slice``: a window of a bigger row-major tensor starting at row 2,
      column 1, so the storage offset and the row pitch are both odd.
    * ``stride2``: every other column of a wider tensor (inner stride 2).
    * ``col_slice``: column-major with a padded leading dimension and an odd
      storage offset.

    The backing tensor is generated on the CPU with ``generator`` (so results
    do not depend on the device RNG) and moved to ``device`` before the view is
    taken, which preserves the strides and the storage offset.
    """
    default_low, default_high = VALUE_RANGE[dtype]
    low = default_low if low is None else low
    high = default_high if high is None else high

    def random(*shape):
        values = torch.randint(low, high, shape, dtype=dtype, generator=generator)
        return values.to(device)

    if layout == "row":
        view = random(rows, cols)
    elif layout == "col":
        view = random(cols, rows).t()
    elif layout == "slice":
        view = random(rows + 3, cols + 5)[2 : 2 + rows, 1 : 1 + cols]
    elif layout == "stride2":
        view = random(rows, 2 * cols + 1)[:, 1::2]
    elif layout == "col_slice":
        view = random(cols + 2, rows + 3)[1 : 1 + cols, 1 : 1 + rows].t()
    else:
        raise ValueError(f"unknown layout {layout!r}")
    assert view.shape == (rows, cols)
    return view


def make_int32(rows, cols, device, generator, low=-(2**31), high=2**31):
    """Random full-range int32 [rows, cols] tensor (e.g. the C operand)."""
    values = torch.randint(low, high, (rows, cols), dtype=torch.int32, generator=generator)
    return values.to(device)


C_LAYOUTS = ("contiguous", "transposed", "slice", "expand_row", "expand_col", "expand_all")


def make_c(rows, cols, layout, device, generator):
    """Random full-range int32 C operand of shape [rows, cols] in ``layout``.

    ``transposed`` is column-major (``c.t().contiguous().t()``), ``slice`` is a
    window with an odd storage offset and pitch, and the ``expand_*`` layouts
    are broadcast views with zero strides made by ``Tensor.expand``.
    """
    if layout == "contiguous":
        c = make_int32(rows, cols, device, generator)
    elif layout == "transposed":
        c = make_int32(cols, rows, device, generator).t()
    elif layout == "slice":
        c = make_int32(rows + 2, cols + 3, device, generator)[1 : 1 + rows, 2 : 2 + cols]
    elif layout == "expand_row":
        c = make_int32(1, cols, device, generator).expand(rows, cols)
    elif layout == "expand_col":
        c = make_int32(rows, 1, device, generator).expand(rows, cols)
    elif layout == "expand_all":
        c = make_int32(1, 1, device, generator).expand(rows, cols)
    else:
        raise ValueError(f"unknown C layout {layout!r}")
    assert c.shape == (rows, cols)
    return c


def poison(out):
    """Fill an int32 output buffer with a sentinel so unwritten entries show."""
    out.fill_(SENTINEL)
    return out


def check_exact(got, expected, context="", expect_nonzero=True, device=None):
    """Assert ``got`` (int32) equals ``expected`` bit for bit.

    With ``expect_nonzero`` the expected value must contain a non-zero entry,
    so an output the kernel never wrote (zeros) cannot pass by accident. With
    ``device`` the result must also live on that device type ("cpu"/"cuda").
    """
    prefix = f"[{context}] " if context else ""
    if device is not None:
        assert got.device.type == torch.device(device).type, (
            f"{prefix}result on {got.device}, expected {device}"
        )
    assert got.dtype == torch.int32, f"{prefix}dtype {got.dtype}, expected torch.int32"
    assert tuple(got.shape) == tuple(expected.shape), (
        f"{prefix}shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    )
    expected = expected.to(dtype=torch.int32)
    if expect_nonzero:
        assert expected.ne(0).any(), f"{prefix}reference is all zeros: test is vacuous"
    got_cpu = got.cpu()
    if not torch.equal(got_cpu, expected):
        mismatch = got_cpu.ne(expected)
        first = tuple(mismatch.nonzero()[0].tolist())
        pytest.fail(
            f"{prefix}{int(mismatch.sum())}/{got.numel()} entries differ; "
            f"first at {first}: got {int(got_cpu[first])}, expected {int(expected[first])}"
        )


@pytest.fixture
def rng(request):
    """CPU generator seeded from the test id: distinct per case, reproducible."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return torch.Generator().manual_seed(seed)


@pytest.fixture(name="ref_gemm")
def _ref_gemm_fixture():
    return ref_gemm


@pytest.fixture(name="make_operand")
def _make_operand_fixture():
    return make_operand


@pytest.fixture(name="make_int32")
def _make_int32_fixture():
    return make_int32


@pytest.fixture(name="make_c")
def _make_c_fixture():
    return make_c


@pytest.fixture(name="poison")
def _poison_fixture():
    return poison


@pytest.fixture(name="check_exact")
def _check_exact_fixture():
    return check_exact


@pytest.fixture(name="wrap_int32")
def _wrap_int32_fixture():
    return wrap_int32


@pytest.fixture(scope="session")
def gpu_backends():
    """``tcgemm.available_backends("cuda")`` (only requested by GPU tests)."""
    import tcgemm

    return list(tcgemm.available_backends("cuda"))

"""tcgemm.quantize: exact agreement with tcgemm.reference.quantize_reference on the CPU and the GPU,
layouts, empty inputs, the error messages of bad input, opcheck, fake tensors, torch.compile and
CUDA graphs. CPU tests run in CI; GPU tests skip without a CUDA device."""

import pytest
import torch

import tcgemm
from tcgemm.reference import quantize_reference

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
GRANULARITIES = ("tensor", "token", "group")
ODD_K = (1, 7, 127, 128, 129, 1000, 4097)
# Layouts of x: contiguous; the transpose of a contiguous [K, M] (the binding makes it
# contiguous); a window with an odd storage offset and pitch (rows read in place, scalar loads);
# a window whose offset and pitch keep 16-byte alignment (rows read in place, vector loads).
LAYOUTS = ("contiguous", "transposed", "row_slice", "aligned_row_slice")


def make_x(m, k, dtype, generator, layout="contiguous", device="cpu"):
    """Random [m, k] activations with per-row magnitudes from 1e-3 to 1e3, an all-zero row (when
    m > 2) and an all-zero 128-group (when k > 128), generated on the CPU and moved to device."""

    def random(rows, cols):
        values = torch.randn(rows, cols, generator=generator)
        values *= torch.logspace(-3, 3, rows).reshape(rows, 1)[torch.randperm(rows, generator=generator)]
        return values.to(dtype)

    if layout == "contiguous":
        x = random(m, k).to(device)
    elif layout == "transposed":
        x = random(k, m).to(device).t()
    elif layout == "row_slice":
        x = random(m + 2, k + 5).to(device)[1 : 1 + m, 3 : 3 + k]
    elif layout == "aligned_row_slice":
        x = random(m + 1, k + 16).to(device)[1 : 1 + m, 8 : 8 + k]
    else:
        raise ValueError(layout)
    assert x.shape == (m, k)
    with torch.no_grad():
        if m > 2:
            x[m // 2] = 0
        if k > 128 and m > 1:
            x[0, 128:256] = 0
    return x


def check_equal(got, expected, name):
    assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype}, expected {expected.dtype}"
    assert got.shape == expected.shape, f"{name}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    got, expected = got.cpu(), expected.cpu()
    if not torch.equal(got, expected):
        bad = (got != expected).nonzero()
        first = tuple(bad[0].tolist())
        pytest.fail(f"{name}: {len(bad)}/{got.numel()} differ; first at {first}: got {got[first]}, expected {expected[first]}")


def check_quantize(x, granularity, static, context=""):
    """quantize(x) == quantize_reference(x) bit for bit, dynamic or with the reference's scales."""
    q_ref, s_ref = quantize_reference(x, granularity)
    assert q_ref.ne(0).any() or x.float().abs().max() == 0, f"[{context}] reference q is all zeros: vacuous"
    if static:
        given = s_ref.to(x.device)
        q, s = tcgemm.quantize(x, granularity, scale=given)
        assert s is not given, f"[{context}] a static scale is returned as a copy"
        check_equal(s, s_ref, f"[{context}] static scale")
    else:
        q, s = tcgemm.quantize(x, granularity)
        check_equal(s, s_ref, f"[{context}] scale")
    assert q.device == x.device and s.device == x.device
    check_equal(q, q_ref, f"[{context}] q")
    return q, s


# ----------------------------------------------------------------------------------------------
# CPU


def test_op_is_registered_with_its_schema():
    schema = str(torch.ops.tcgemm.quantize.default._schema)
    assert schema == ("tcgemm::quantize(Tensor x, str granularity, Tensor? scale=None, Tensor? smooth=None, "
                      "bool rotate=False) -> (Tensor, Tensor)")
    assert "quantize" in tcgemm.__all__


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", ODD_K)
def test_cpu_matches_reference(k, dtype, granularity, static, rng):
    x = make_x(5, k, dtype, rng)
    check_quantize(x, granularity, static, f"cpu {dtype} {granularity} K={k}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cpu_layouts(layout, granularity, dtype, rng):
    x = make_x(7, 300, dtype, rng, layout)
    check_quantize(x, granularity, False, f"cpu {layout}")
    check_quantize(x, granularity, True, f"cpu {layout} static")


def test_reference_definition_by_hand():
    # amax 254 -> scale 2: q = x / 2 with half-way cases rounded to even.
    x = torch.tensor([[1.0, 3.0, 5.0, -1.0, -3.0, 254.0, -253.0, 0.25]])
    q, s = tcgemm.quantize(x, "token")
    assert s.tolist() == [[2.0]]
    assert q.tolist() == [[0, 2, 2, 0, -2, 127, -126, 0]]
    assert torch.equal(quantize_reference(x, "token")[0], q)


def test_static_scale_clamps_and_rounds_half_to_even():
    x = torch.tensor([[0.5, 1.5, 2.5, -0.5, -2.5, 1000.0, -1000.0, 126.5]])
    q, _ = tcgemm.quantize(x, "tensor", scale=torch.tensor(1.0))
    assert q.tolist() == [[0, 2, 2, 0, -2, 127, -127, 126]]
    assert torch.equal(quantize_reference(x, "tensor", torch.tensor(1.0))[0], q)


def test_all_zero_input_has_scale_one():
    x = torch.zeros(3, 300, dtype=torch.bfloat16)
    for granularity, shape in (("tensor", ()), ("token", (3, 1)), ("group", (3, 3))):
        q, s = tcgemm.quantize(x, granularity)
        assert torch.equal(s, torch.ones(shape)) and not q.any()


@pytest.mark.parametrize("shape", [(4, 3, 200), (200,), (2, 1, 3, 129)], ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_leading_dimensions_are_flattened(shape, granularity, rng):
    x = torch.randn(shape, generator=rng, dtype=torch.float32).to(torch.float16)
    q, s = tcgemm.quantize(x, granularity)
    groups = (shape[-1] + 127) // 128
    expected_shape = {"tensor": (), "token": shape[:-1] + (1,), "group": shape[:-1] + (groups,)}[granularity]
    assert q.shape == x.shape and s.shape == expected_shape
    q_ref, s_ref = quantize_reference(x, granularity)
    check_equal(q, q_ref, "q")
    check_equal(s, s_ref, "scale")
    q2, s2 = tcgemm.quantize(x, granularity, scale=s)
    check_equal(s2, s, "static scale returned")
    check_equal(q2, q_ref, "static q")


@pytest.mark.parametrize("shape", [(1, 1), ()], ids=str)
def test_per_tensor_static_scale_shapes(shape, rng):
    x = make_x(3, 50, torch.float32, rng)
    given = torch.full(shape, 0.0625)
    q, s = tcgemm.quantize(x, "tensor", scale=given)
    check_equal(s, given, "static scale returned")
    check_equal(q, quantize_reference(x, "tensor", given)[0], "q")
    q1, _ = tcgemm.quantize(x, "tensor", scale=torch.full((1,), 0.0625))
    check_equal(q1, q, "q with scale [1]")


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("mk", [(0, 5), (4, 0), (0, 0)], ids=str)
def test_empty_input(mk, granularity):
    m, k = mk
    x = torch.empty(m, k, dtype=torch.bfloat16)
    q, s = tcgemm.quantize(x, granularity)
    expected = {"tensor": (), "token": (m, 1), "group": (m, (k + 127) // 128)}[granularity]
    assert q.shape == (m, k) and q.dtype == torch.int8
    assert s.shape == expected and s.dtype == torch.float32
    assert torch.equal(s, torch.ones(expected))  # amax of nothing is 0, whose scale is 1
    q_ref, s_ref = quantize_reference(x, granularity)
    check_equal(s, s_ref, "scale")


def test_static_scale_may_be_non_contiguous(rng):
    x = make_x(6, 300, torch.float32, rng)
    _, s = quantize_reference(x, "group")
    given = s.t().contiguous().t()  # [6, 3] column-major
    q, out = tcgemm.quantize(x, "group", scale=given)
    check_equal(out, given, "returned scale")
    check_equal(q, quantize_reference(x, "group")[0], "q")
    token = quantize_reference(x, "token")[1]
    q, _ = tcgemm.quantize(x, "token", scale=token.expand(6, 1))
    check_equal(q, quantize_reference(x, "token")[0], "q token")


def _bad_inputs():
    x = torch.randn(5, 300)
    op = torch.ops.tcgemm.quantize.default
    return [
        # The op itself: torch's stable ABI gives its errors as RuntimeError (the API retypes them).
        ("x 3-D", lambda: op(x[None], "token", None), RuntimeError,
         r"tcgemm.quantize: argument 'x' must be a 2-D tensor \[M, K\], got a 3-D tensor"),
        ("x 1-D", lambda: op(x[0], "token", None), RuntimeError,
         r"tcgemm.quantize: argument 'x' must be a 2-D tensor \[M, K\], got a 1-D tensor"),
        ("x 0-D (wrapper)", lambda: tcgemm.quantize(x[0, 0]), ValueError,
         r"tcgemm.quantize: argument 'x' must have shape \[..., K\], got a 0-D tensor"),
        ("x int8", lambda: tcgemm.quantize(x.to(torch.int8)), TypeError,
         "tcgemm.quantize: argument 'x' must have dtype torch.bfloat16, torch.float16 or torch.float32, got torch.int8"),
        ("x float64", lambda: tcgemm.quantize(x.double()), TypeError,
         "argument 'x' must have dtype .* got torch.float64"),
        ("granularity", lambda: tcgemm.quantize(x, "row"), ValueError,
         "tcgemm.quantize: argument 'granularity' must be one of 'tensor', 'token', 'group'; got 'row'"),
        ("scale dtype", lambda: tcgemm.quantize(x, "token", scale=torch.ones(5, 1, dtype=torch.float16)), TypeError,
         "tcgemm.quantize: argument 'scale' must have dtype torch.float32, got torch.float16"),
        ("scale token shape", lambda: tcgemm.quantize(x, "token", scale=torch.ones(5)), ValueError,
         r"tcgemm.quantize: argument 'scale' must have shape \[M, 1\] = \[5, 1\] for granularity 'token', got \[5\]"),
        ("scale token rows", lambda: tcgemm.quantize(x, "token", scale=torch.ones(4, 1)), ValueError,
         r"argument 'scale' must have shape \[M, 1\] = \[5, 1\] for granularity 'token', got \[4, 1\]"),
        ("scale group shape", lambda: tcgemm.quantize(x, "group", scale=torch.ones(5, 2)), ValueError,
         r"tcgemm.quantize: argument 'scale' must have shape \[M, ceil\(K / 128\)\] = \[5, 3\] for granularity "
         r"'group', got \[5, 2\]"),
        ("scale tensor shape", lambda: tcgemm.quantize(x, "tensor", scale=torch.ones(2)), ValueError,
         r"tcgemm.quantize: argument 'scale' must have one element \(shape \[\], \[1\] or \[1, 1\]\) for "
         r"granularity 'tensor', got shape \[2\]"),
        ("scale tensor 3-D", lambda: tcgemm.quantize(x, "tensor", scale=torch.ones(1, 1, 1)), ValueError,
         r"must have one element \(shape \[\], \[1\] or \[1, 1\]\) for granularity 'tensor', got shape \[1, 1, 1\]"),
        ("scale device", lambda: tcgemm.quantize(x, "token", scale=torch.ones(5, 1, device="meta")), ValueError,
         r"tcgemm.quantize: argument 'scale' must be on the same device as 'x' \(cpu\), got meta"),
    ]


@pytest.mark.parametrize("case", _bad_inputs(), ids=lambda case: case[0])
def test_bad_input_names_the_argument(case):
    _, call, exc, message = case
    with pytest.raises(exc, match=message):
        call()


def test_fake_tensor_shapes_and_errors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(9, 300, dtype=torch.bfloat16)
        for granularity, shape in (("tensor", ()), ("token", (9, 1)), ("group", (9, 3))):
            q, s = tcgemm.quantize(x, granularity)
            assert q.shape == (9, 300) and q.dtype == torch.int8
            assert s.shape == shape and s.dtype == torch.float32
        q, s = tcgemm.quantize(torch.empty(2, 3, 300), "group")
        assert q.shape == (2, 3, 300) and s.shape == (2, 3, 3)
        with pytest.raises(ValueError, match="argument 'granularity' must be one of"):
            tcgemm.quantize(x, "block")
        with pytest.raises(TypeError, match="argument 'x' must have dtype"):
            tcgemm.quantize(x.int())
        with pytest.raises(ValueError, match=r"argument 'scale' must have shape \[M, 1\] = \[9, 1\]"):
            tcgemm.quantize(x, "token", scale=torch.empty(9, 2))


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_opcheck(granularity, rng):
    x = make_x(5, 200, torch.bfloat16, rng)
    op = torch.ops.tcgemm.quantize.default
    torch.library.opcheck(op, (x, granularity, None))
    torch.library.opcheck(op, (x.float().t().contiguous().t(), granularity, None))
    _, s = quantize_reference(x, granularity)
    torch.library.opcheck(op, (x, granularity, s))


def test_torch_compile_fullgraph_cpu(rng):
    x = make_x(6, 300, torch.bfloat16, rng)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(x):
        q, s = tcgemm.quantize(x, "group")
        q2, s2 = tcgemm.quantize(x.reshape(2, 3, 300), "token")
        return q, s, q2, s2

    q, s, q2, s2 = f(x)
    check_equal(q, quantize_reference(x, "group")[0], "group q")
    check_equal(s, quantize_reference(x, "group")[1], "group scale")
    check_equal(q2.reshape(6, 300), quantize_reference(x, "token")[0], "token q")
    assert s2.shape == (2, 3, 1)


# ----------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
# 16384 and 20000: a block per row holding it in registers (256 and 640 threads of bf16/fp16);
# 32768: 1024 threads of bf16/fp16, the most held; 32776: swept twice.
@pytest.mark.parametrize("k", ODD_K + (16384, 20000, 32768, 32776))
@pytest.mark.parametrize("m", [3, 33])
def test_gpu_matches_reference_and_cpu(m, k, dtype, granularity, static, rng):
    x = make_x(m, k, dtype, rng, device="cuda")
    q, s = check_quantize(x, granularity, static, f"cuda M={m} K={k} {dtype} {granularity}")
    q_cpu, s_cpu = tcgemm.quantize(x.cpu(), granularity, scale=None if not static else s.cpu())
    check_equal(q, q_cpu, "gpu vs cpu q")
    check_equal(s, s_cpu, "gpu vs cpu scale")


def hard_rows(scales, k, generator):
    """Rows of fp32 values that stress x / scale -> int8 for each static scale: quotients at
    and next to every half-integer from -130.5 to 130.5 (round half to even, and the clamp at
    +-127), random values, +-inf, +-0, denormals, and the scale's own multiples near 127.
    (Non-finite values have their own tests in test_bad_data.py.)"""
    rows = []
    for s in scales:
        s32 = torch.tensor(s, dtype=torch.float32)
        ties = (torch.arange(-261, 262, dtype=torch.float32) * 0.5) * s32
        near = torch.cat([ties, torch.nextafter(ties, ties + 1), torch.nextafter(ties, ties - 1)])
        special = torch.tensor([float("inf"), float("-inf"), 0.0, -0.0, 1e-45, -1e-45, 1e-39])
        edge = torch.stack([s32 * 127, s32 * 127.5, -s32 * 127.5, torch.nextafter(s32 * 127.5, s32 * 0)])
        random = torch.randn(k, generator=generator) * s32 * 60
        row = torch.cat([near, special, edge, random])[:k]
        rows.append(torch.cat([row, torch.zeros(k - row.numel())]))
    return torch.stack(rows)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_exact_on_hard_quotients(device, dtype, rng):
    """The GPU divides with a once-per-scale reciprocal and FMA correction steps where the scale
    allows (2^-90..2^90), and with the IEEE division elsewhere (the CPU always); both must give
    the reference's bits on ties, neighbours of ties, the clamp edges and special values."""
    scales = [1.0, 2.0, 0.1, 1 / 3, 0.0078125, 1e-6, 7.1e-3, 3.3e4, 1e-30, 1e30, 2.0**-90, 2.0**90,
              2.0**-100, 2.0**100, 3e-39]
    x = hard_rows(scales, 2048, rng).to(dtype)
    scale = torch.tensor(scales, dtype=torch.float32).reshape(-1, 1)
    q, _ = tcgemm.quantize(x.to(device), "token", scale=scale.to(device))
    check_equal(q, quantize_reference(x, "token", scale)[0], f"static token {dtype}")
    # Dynamic: rows whose amax is 127 * c, so the computed scale is c or next to it and the
    # other values sit on (or next to) half-integer quotients of it.
    finite = x[:, :1600].clone()
    finite[~torch.isfinite(finite)] = 0
    for granularity in GRANULARITIES:
        check_quantize(finite.to(device), granularity, False, f"dynamic {granularity} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", [136, 1000, 4096, 20000])
def test_gpu_layouts(k, layout, granularity, dtype, rng):
    x = make_x(9, k, dtype, rng, layout, device="cuda")
    check_quantize(x, granularity, False, f"cuda {layout} K={k}")
    check_quantize(x, granularity, True, f"cuda {layout} K={k} static")


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("mk", [(4099, 64), (20001, 8), (1, 65536), (3, 100003), (70000, 136)], ids=str)
def test_gpu_grid_shapes(mk, granularity, rng):
    """Many short rows (grid-stride loops, many blocks folding into one amax), very long rows
    (the two-sweep token kernel), and more rows than the 2-D grids of the element-wise kernels cover at once."""
    m, k = mk
    x = make_x(m, k, torch.bfloat16, rng, device="cuda")
    check_quantize(x, granularity, False, f"cuda M={m} K={k}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
@pytest.mark.parametrize("k", [4096, 14336])
def test_gpu_token_teams_agree(k, dtype, rng):
    """A few rows of bf16/fp16 take the token kernel's short team (more threads a row), many rows
    its default team: both give the reference's bits, and a row's bits do not depend on the rows
    quantized with it."""
    x = make_x(600, k, dtype, rng, device="cuda")
    q_many, s_many = check_quantize(x, "token", False, f"600 rows K={k}")
    q_few, s_few = check_quantize(x[:40], "token", False, f"40 rows K={k}")
    check_equal(q_few, q_many[:40], "few rows against many: q")
    check_equal(s_few, s_many[:40], "few rows against many: scale")


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_gpu_empty_input(granularity):
    for m, k in ((0, 5), (4, 0)):
        x = torch.empty(m, k, dtype=torch.float16, device="cuda")
        q, s = tcgemm.quantize(x, granularity)
        assert q.shape == (m, k) and q.is_cuda and s.is_cuda
        check_equal(s, quantize_reference(x, granularity)[1], "scale")


@pytest.mark.gpu
def test_gpu_uses_the_current_stream(rng):
    x = make_x(64, 4096, torch.bfloat16, rng, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        results = [tcgemm.quantize(x, g) for g in GRANULARITIES]
    torch.cuda.current_stream().wait_stream(side)
    for g, (q, s) in zip(GRANULARITIES, results):
        check_equal(q, quantize_reference(x, g)[0], f"{g} q")
        check_equal(s, quantize_reference(x, g)[1], f"{g} scale")


@pytest.mark.gpu
def test_gpu_scale_on_another_device_is_rejected():
    x = torch.randn(5, 64, device="cuda")
    with pytest.raises(ValueError, match=r"argument 'scale' must be on the same device as 'x' \(cuda:0\), got cpu"):
        tcgemm.quantize(x, "token", scale=torch.ones(5, 1))
    with pytest.raises(ValueError, match=r"argument 'scale' must be on the same device as 'x' \(cuda:0\), got cpu"):
        tcgemm.quantize(x, "tensor", scale=torch.tensor(1.0))


@pytest.mark.gpu
def test_gpu_torch_compile_fullgraph(rng):
    x = make_x(33, 1000, torch.bfloat16, rng, device="cuda")
    static = quantize_reference(x, "token")[1].to("cuda")

    @torch.compile(fullgraph=True)
    def f(x, static):
        outs = [tcgemm.quantize(x, g) for g in GRANULARITIES]
        outs.append(tcgemm.quantize(x * 2, "token", scale=static * 2))
        return outs

    outs = f(x, static)
    for g, (q, s) in zip(GRANULARITIES, outs):
        check_equal(q, quantize_reference(x, g)[0], f"{g} q")
        check_equal(s, quantize_reference(x, g)[1], f"{g} scale")
    check_equal(outs[3][0], quantize_reference(x * 2, "token", static * 2)[0], "static q")


@pytest.mark.gpu
def test_gpu_cuda_graph_capture(rng):
    x = make_x(17, 1000, torch.float16, rng, device="cuda")
    static = torch.full((17, 1), 0.01, device="cuda")

    def run():
        outs = [tcgemm.quantize(x, g) for g in GRANULARITIES]
        outs.append(tcgemm.quantize(x, "token", scale=static))
        return outs

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = run()

    for seed in range(2):  # new data in the captured input each replay
        x.copy_(make_x(17, 1000, torch.float16, torch.Generator().manual_seed(seed), device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        for g, (q, s) in zip(GRANULARITIES, outs):
            check_equal(q, quantize_reference(x, g)[0], f"replay {seed} {g} q")
            check_equal(s, quantize_reference(x, g)[1], f"replay {seed} {g} scale")
        check_equal(outs[3][0], quantize_reference(x, "token", static)[0], f"replay {seed} static q")

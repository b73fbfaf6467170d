"""tcgemm.quant_linear, the one-op W8A8 layer behind QuantLinear.forward.

The op is defined as tcgemm.quantize followed by tcgemm.scaled_gemm, so every result is compared
with that pair bit for bit (fresh random inputs, every weight-scale layout, bias kinds, input
dtypes, leading shapes, strides, and on the GPU every backend that runs the scaled GEMM and the
row counts of the few-rows kernel). Then the op's registration: opcheck, torch.compile, CUDA
graphs, and the programmatic dependent launch of the GPU path (a weight written just before the
layer is read, consecutive layers in one graph).
"""

import pytest
import torch

import tcgemm
from cases import FUSED_VECTORS_PER_THREAD, cuda_kernels
from tcgemm.nn import quantize_weight

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
_GRANULARITY = {"token": "token", "block": "group"}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def make_layer(n, k, weight, bias, device, seed=0):
    """(int8 weight [N, K], its scales in the layout `weight`, bias or None) from a random float weight."""
    g = _gen(seed)
    w = torch.randn(n, k, generator=g) * (0.5 + torch.rand(n, 1, generator=g))
    if weight == "row_block":  # [N, ceil(K/128)]: a channel's 1x128 blocks
        q, s = tcgemm.quantize(w, "group")
    else:
        q, s = quantize_weight(w, weight)
    b = None
    if bias is not None:
        b = torch.randn(n, generator=g).to(bias)
    return q.to(device), s.to(device), None if b is None else b.to(device)


def unfused(x, q, s, b, activation, backend="auto"):
    """The op's definition: quantize, then scaled_gemm, [..., K] flattened to rows."""
    x2d = x.reshape(-1, x.shape[-1]) if x.dim() != 1 else x[None]
    qx, sx = tcgemm.quantize(x2d, _GRANULARITY[activation])
    scale_b = s
    if s.dim() == 2 and s.shape == (1, q.shape[0]) and q.shape[0] != 1:
        # 128x128 block scales of shape [1, N] would read as per channel in scaled_gemm (which
        # tells layouts apart by shape); none of the shapes below is of that kind.
        raise AssertionError("ambiguous weight-scale shape in a test case")
    y = tcgemm.scaled_gemm(qx, q.t(), sx, scale_b, b, out_dtype=x.dtype, backend=backend)
    return y.reshape(*x.shape[:-1], q.shape[0])


WEIGHTS = ["channel", "block", "row_block"]
BIASES = [None, torch.float32, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ["token", "block"])
@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("bias", BIASES, ids=str)
@pytest.mark.parametrize("lead,n,k", [((3,), 40, 300), ((2, 5), 130, 256), ((), 96, 64), ((1,), 1, 129)], ids=str)
def test_matches_quantize_then_scaled_gemm(lead, n, k, bias, weight, activation, dtype, device):
    q, s, b = make_layer(n, k, weight, bias, device, seed=n + k)
    x = torch.randn(*lead, k, generator=_gen(k)).to(device=device, dtype=dtype)
    got = tcgemm.quant_linear(x, q, s, b, activation)
    assert got.shape == (*lead, n) and got.dtype == dtype and got.device.type == device
    assert torch.equal(got, unfused(x, q, s, b, activation))


def test_strided_and_broadcast_inputs(device):
    q, s, b = make_layer(64, 256, "channel", torch.float32, device)
    base = torch.randn(6, 512, generator=_gen(3)).to(device)
    # Leading dimensions that collapse into one row stride are read in place; the others (a
    # transposed batch, an expand-ed batch) are reshaped first: the same bits either way.
    batch = base.view(2, 3, 512)
    for x in (base[:, ::2], base[:, :256].t().contiguous().t(), base[:1, :256].expand(6, 256),
              batch[..., 100:356], batch[..., :256].transpose(0, 1), batch[:1, :, :256].expand(4, 3, 256),
              base[:3, None, :256].expand(3, 2, 256), batch[:, :1, :256], base[2, :256]):
        got = tcgemm.quant_linear(x, q, s, b)
        assert got.shape == (*x.shape[:-1], 64)
        assert torch.equal(got, unfused(x.contiguous(), q, s, b, "token"))


def test_empty_problems(device):
    q, s, b = make_layer(8, 64, "channel", torch.float32, device)
    x = torch.randn(0, 64, device=device)
    assert tcgemm.quant_linear(x, q, s, b).shape == (0, 8)
    y = tcgemm.quant_linear(torch.randn(2, 3, 0, device=device), q[:, :0], s, b)  # K = 0: out = bias
    assert torch.equal(y, b.expand(2, 3, 8))
    y = tcgemm.quant_linear(torch.empty(3, 2, 0, device=device).transpose(0, 1), q[:, :0], s, b)  # rows not a view
    assert torch.equal(y, b.expand(2, 3, 8))
    assert torch.equal(tcgemm.quant_linear(torch.randn(4, 0, device=device), q[:, :0], s), torch.zeros(4, 8, device=device))
    assert tcgemm.quant_linear(torch.randn(4, 64, device=device), q[:0], s[:0]).shape == (4, 0)


def test_long_k_needs_per_block_scales():
    k = 131072
    q = torch.zeros(2, k, dtype=torch.int8)
    x = torch.ones(1, k)
    with pytest.raises(ValueError, match="use activation='block'"):
        tcgemm.quant_linear(x, q, torch.ones(2))
    assert tcgemm.quant_linear(x, q, torch.ones(2), activation="block").abs().sum() == 0


def test_python_wrapper_argument_types():
    q, s, _ = make_layer(8, 64, "channel", None, "cpu")
    x = torch.randn(2, 64)
    with pytest.raises(TypeError, match="argument 'x' must be a torch.Tensor"):
        tcgemm.quant_linear(x.numpy(), q, s)
    with pytest.raises(TypeError, match="argument 'activation' must be a str"):
        tcgemm.quant_linear(x, q, s, None, 1)
    with pytest.raises(ValueError, match="argument 'activation' must be 'token', 'block' or 'static'"):
        tcgemm.quant_linear(x, q, s, None, "group")


@pytest.mark.parametrize("activation", ["token", "block"])
def test_opcheck(activation, device):
    for weight in WEIGHTS:
        q, s, b = make_layer(72, 260, weight, torch.float32, device)
        x = torch.randn(2, 3, 260, generator=_gen(5)).to(device=device, dtype=torch.bfloat16)
        torch.library.opcheck(torch.ops.tcgemm.quant_linear.default, (x, q, s, b, activation, None, None, "auto"))
        torch.library.opcheck(torch.ops.tcgemm.quant_linear.default, (x[0, 0], q, s, None, activation, None, None, "auto"))


def test_compile_dynamic_shapes_cpu():
    q, s, b = make_layer(48, 300, "block", torch.float32, "cpu")

    @torch.compile(fullgraph=True, dynamic=True, backend="aot_eager")
    def f(x):
        return tcgemm.quant_linear(x, q, s, b, "block")

    for m in (5, 9, 2):
        x = torch.randn(m, 300, generator=_gen(m))
        assert torch.equal(f(x), unfused(x, q, s, b, "block"))


# ---------------------------------------------------------------------------------------------
# GPU: every backend of the scaled GEMM, the few-rows kernel's row counts, overlap.


@pytest.mark.gpu
@pytest.mark.parametrize("activation", ["token", "block"])
@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("m", [1, 3, 4, 8, 16, 17, 32, 100])
def test_gpu_every_backend_and_row_count(m, weight, activation):
    n, k = 4096, 1152  # wide enough for the few-rows route; 9 K blocks
    q, s, b = make_layer(n, k, weight, torch.float32, "cuda", seed=m)
    for dtype in (torch.bfloat16, torch.float16):
        x = torch.randn(m, k, generator=_gen(m)).to(device="cuda", dtype=dtype)
        for backend in ["auto", *tcgemm.backends_for("quant_linear", device="cuda")]:
            if backend == "skinny" and m > 32:
                continue
            got = tcgemm.quant_linear(x, q, s, b, activation, backend=backend)
            assert torch.equal(got, unfused(x, q, s, b, activation, backend)), f"backend {backend}"


def _nan_equal(a, b):
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ["token", "block", "static"])
@pytest.mark.parametrize("weight", WEIGHTS)
@pytest.mark.parametrize("k", [1000, 1008])
def test_gpu_few_rows_static_smooth_and_bad_data(k, weight, activation, dtype):
    """The few-rows paths (one kernel that quantizes x itself at up to 4 rows; overlapped
    launches of two on sm_90 beyond; K = 1000 gives a weight whose rows need a padded copy, and
    two kernels): tcgemm.quantize followed by tcgemm.scaled_gemm, bit for bit, for every row count
    up to 16, a K tail (K % 128 != 0), SmoothQuant multipliers, bias, rows holding NaN or inf,
    and invalid static scales."""
    n = 4096
    q, s, b = make_layer(n, k, weight, torch.float32, "cuda", seed=k)
    smooth = (0.25 + torch.rand(k, generator=_gen(5))).cuda()
    granularity = {"token": "token", "block": "group", "static": "tensor"}[activation]
    for m in range(1, 17):
        x = (torch.randn(m, k, generator=_gen(m)) * 3).to(device="cuda", dtype=dtype)
        for mul in (None, smooth):
            bad = x.clone()
            bad[m - 1, 5], bad[0, 999] = float("nan"), float("-inf")  # the last and the first row
            if m >= 3:
                bad[1, 7] = float("inf")
            cases = [(x, 0.05), (bad, 0.05)]
            if activation == "static":
                cases += [(x, 0.0), (x, float("nan")), (x, 1e-30)]  # two invalid scales, one tiny
            for xv, given in cases:
                in_scale = torch.tensor(given, device="cuda") if activation == "static" else None
                got = tcgemm.quant_linear(xv, q, s, b, activation, input_scale=in_scale, smooth=mul)
                qx, sx = tcgemm.quantize(xv, granularity, scale=in_scale, smooth=mul)
                expected = tcgemm.scaled_gemm(qx, q.t(), sx, s, b, out_dtype=dtype)
                assert _nan_equal(got, expected), f"m={m} smooth={mul is not None} scale={given}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ["token", "block", "static"])
@pytest.mark.parametrize("m,k,row_stride,n", [
    (1, 4096, None, 4096), (2, 1008, None, 4096), (4, 2048, None, 4096), (1, 8192, None, 4096),
    (3, 1008, 1016, 4096),  # rows of x with a stride, still whole vectors
    (1, 4096, None, 12288), (3, 1008, 1016, 12288),  # more tiles than blocks: the persistent grid's loop
    (4, 4096, None, 4096), (1, 16384, None, 4096), (5, 1024, None, 4096), (3, 1008, 1010, 4096)], ids=str)
def test_gpu_one_kernel_at_a_few_rows(m, k, row_stride, n, activation, dtype):
    """Up to 4 rows of x, read as 16-byte vectors, a few per thread of the GEMM's 256, symmetric
    scales (dynamic, or static per tensor): the skinny GEMM quantizes x itself, one kernel for the
    layer, with the bits of the two ops, also when a block takes several tiles (one row against
    20 MiB of weight or more on sm90: the GEMV, two kernels, the same bits). Beyond those
    limits, or with rows whose stride is not a multiple of the vector, two kernels and the same
    bits."""
    vec = 16 // dtype.itemsize
    if activation == "block":  # a group of 128 values takes 128 / vec lanes
        fits = m * -(-k // 128) * (128 // vec) <= FUSED_VECTORS_PER_THREAD * 256
    else:  # each of the 256 threads holds FUSED_VECTORS_PER_THREAD // m vectors of each row
        fits = -(-k // vec // 256) <= FUSED_VECTORS_PER_THREAD // m
    one_kernel = m <= 4 and fits and (row_stride is None or row_stride % vec == 0)
    q, s, b = make_layer(n, k, "block" if activation == "block" else "channel", torch.float32, "cuda", seed=k)
    base = (torch.randn(m, row_stride or k, generator=_gen(m + k)) * 2).to(device="cuda", dtype=dtype)
    x = base[:, :k]
    given = torch.tensor(0.03, device="cuda") if activation == "static" else None
    got = tcgemm.quant_linear(x, q, s, b, activation, input_scale=given)
    if activation == "static":
        qx, sx = tcgemm.quantize(x, "tensor", scale=given)
        assert torch.equal(got, tcgemm.scaled_gemm(qx, q.t(), sx, s, b, out_dtype=dtype))
    else:
        assert torch.equal(got, unfused(x, q, s, b, activation))
    kernels = cuda_kernels(lambda: tcgemm.quant_linear(x, q, s, b, activation, input_scale=given))
    # one row against an int8 weight of 20 MiB or more: sm90's GEMV, after x's own quantization
    on_gemv = any("gemv_int8_kernel" in name for name in kernels)
    assert not on_gemv or (m == 1 and n * k >= 20 << 20 and torch.cuda.get_device_capability() == (9, 0)), kernels
    one_kernel = one_kernel and not on_gemv
    assert len(kernels) == (1 if one_kernel else 2), kernels
    assert ("quantize" in kernels[0]) != one_kernel, kernels  # the quantize kernel comes first when there are two


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("m", [1, 8])
def test_weight_written_just_before_the_layer(m, bits):
    """A weight written just before the layer (a copy_ into it) is what the layer reads. At 8 rows
    the few-rows GEMM reads the weight before it waits for the kernel before it (int8: a prefetch
    into L2; 4-bit: its rings' first copies into shared memory): the quantize kernel in between
    waits for the write before it lets the GEMM start. At one row the GEMM quantizes x itself and
    touches the weight only after its wait."""
    n, k = 8192, 4096
    layer = tcgemm.QuantLinear(k, n, bias=False, device="cuda", scheme="w4a8" if bits == 4 else None)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if bits == 4:
        weights = [torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8) for _ in range(3)]
        int8_of = [tcgemm.unpack_int4(w, layer.weight_group_scale) for w in weights]
    else:
        weights = int8_of = [torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8) for _ in range(3)]
    expected = [unfused(x, w, layer.weight_scale, None, "token") for w in int8_of]
    torch.cuda.synchronize()
    with torch.no_grad():
        for rep in range(20):
            i = rep % 3
            layer.weight.copy_(weights[i])
            assert torch.equal(layer(x), expected[i]), f"repetition {rep}"


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 16, 64])
def test_consecutive_layers_in_a_cuda_graph(m):
    """A stack of layers, each reading the output of the one before, captured in one graph: the
    overlapped launches must not let a layer read its input early."""
    dims = [1024, 4096, 2048, 4096, 1024]
    layers = [tcgemm.QuantLinear.from_linear(torch.nn.Linear(i, o, device="cuda"))
              for i, o in zip(dims[:-1], dims[1:])]

    def run(x):
        for layer in layers:
            x = torch.relu(layer(x)) if layer is not layers[-1] else layer(x)
        return x

    def run_plain(x):  # the same, with no op between layers: the kernels follow each other directly
        for layer in layers:
            x = layer(x)
        return x

    static_x = torch.randn(m, dims[0], device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        for fn in (run, run_plain):
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    fn(static_x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = fn(static_x)
            for seed in range(4):
                x = torch.randn(m, dims[0], generator=_gen(seed)).to(device="cuda", dtype=torch.bfloat16)
                static_x.copy_(x)
                graph.replay()
                expected = fn(x)
                torch.cuda.synchronize()
                assert torch.equal(static_out, expected), f"{fn.__name__} seed={seed}"


@pytest.mark.gpu
def test_compile_fullgraph_cuda():
    torch._dynamo.reset()
    q, s, b = make_layer(4096, 512, "channel", torch.float32, "cuda")
    f = torch.compile(lambda x: tcgemm.quant_linear(x, q, s, b), fullgraph=True)
    for m in (1, 7, 64):
        x = torch.randn(m, 512, device="cuda", dtype=torch.bfloat16)
        assert torch.equal(f(x), unfused(x, q, s, b, "token"))

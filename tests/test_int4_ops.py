"""Packed 4-bit weights at the op level: tcgemm.unpack_int4, tcgemm.int4_gemm and tcgemm.quant_linear
with a uint8 [N, K/2] weight.

The contract: the int32 accumulation against a 4-bit weight is, on every backend, bit for bit the
int8 GEMM of the unpacked weight (q, or q times its two-level group scale), which is exact
against an int64 reference; a 4-bit quant_linear equals the same op on the unpacked int8 weight
bit for bit on the same backend. Packing here is written independently of the library.
"""

import re

import pytest
import torch

import tcgemm
from cases import FUSED_VECTORS_PER_THREAD, cuda_kernels
from tcgemm.reference import gemm_reference

U8, I8 = torch.uint8, torch.int8


def pack(q: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] in [-8, 7] -> uint8 [N, K/2]: k = 2j in the low nibble of byte j, 2j + 1 high."""
    lo, hi = q[:, 0::2].to(torch.int16) & 0xF, q[:, 1::2].to(torch.int16) & 0xF
    return (lo | (hi << 4)).to(U8)


def unpacked(q: torch.Tensor, group_scale=None) -> torch.Tensor:
    """The int8 weight a packed q stands for: q, or q times its group's scale."""
    if group_scale is None:
        return q.clone()
    k = q.shape[1]
    s = group_scale.to(torch.int16).repeat_interleave(128, dim=1)[:, :k]
    return (q.to(torch.int16) * s).to(I8)


def random_q4(n, k, rng):
    return torch.randint(-8, 8, (n, k), generator=rng, dtype=I8)


def random_group_scale(n, k, rng):
    return torch.randint(1, 17, (n, (k + 127) // 128), generator=rng, dtype=I8)


def int4_case(m, n, k, scaled, rng):
    """An int8 A [M, K], a 4-bit q [N, K], its group scales (or None) and the int8 weight they stand for."""
    a = torch.randint(-128, 128, (m, k), generator=rng, dtype=I8)
    q = random_q4(n, k, rng)
    gs = random_group_scale(n, k, rng) if scaled else None
    return a, q, gs, unpacked(q, gs)


def two_level_layer_case(m, n, k, out_dtype, rng):
    """A two-level 4-bit layer on the GPU: x [m, k] of out_dtype, the packed weight, its group scales,
    the int8 weight they stand for, per-channel scales and a bias."""
    q, gs = random_q4(n, k, rng), random_group_scale(n, k, rng)
    x = torch.randn(m, k, generator=rng).to(out_dtype).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    bias = torch.randn(n, generator=rng).cuda()
    return x, pack(q).cuda(), gs.cuda(), unpacked(q, gs).cuda(), scale, bias


def test_pack_layout_by_hand():
    q = torch.tensor([[1, -1, 7, -8]], dtype=I8)
    assert pack(q).tolist() == [[0xF1, 0x87]]
    assert tcgemm.unpack_int4(pack(q)).tolist() == q.tolist()


@pytest.mark.parametrize("k", [2, 30, 128, 256, 384, 1000])
@pytest.mark.parametrize("scaled", [False, True])
def test_unpack_matches_the_definition(device, k, scaled, rng):
    q = random_q4(37, k, rng)
    gs = random_group_scale(37, k, rng) if scaled else None
    got = tcgemm.unpack_int4(pack(q).to(device), None if gs is None else gs.to(device))
    assert got.dtype == I8 and got.shape == (37, k) and got.device.type == device
    assert torch.equal(got.cpu(), unpacked(q, gs))


@pytest.mark.parametrize("scale", [None] + list(range(1, 17)))
def test_unpack_every_byte_at_every_group_scale(device, scale):
    """Every packed byte value at every K position of an 8-value word (the unpacking works a word
    at a time: (q + 8) s + 128 - 8 s per byte without carries, common/int4.h), with a K tail."""
    n, k = 256, 136  # row r holds bytes r, r + 1, ...: value v sits at byte position p of a word in row v - p
    packed = ((torch.arange(k // 2)[None, :] + torch.arange(n)[:, None]) % 256).to(U8)
    q = torch.stack([packed.to(torch.int16) & 0xF, packed.to(torch.int16) >> 4], dim=2).reshape(n, k)
    q = torch.where(q >= 8, q - 16, q).to(I8)
    gs = None if scale is None else torch.full((n, 2), scale, dtype=I8)
    assert torch.equal(pack(q), packed)
    got = tcgemm.unpack_int4(packed.to(device), None if gs is None else gs.to(device))
    assert torch.equal(got.cpu(), unpacked(q, gs))


def test_group_scale_products_fill_int8():
    q = torch.tensor([[-8, 7] * 64], dtype=I8)
    gs = torch.tensor([[16]], dtype=I8)
    w = tcgemm.unpack_int4(pack(q), gs)
    assert w.min() == -128 and w.max() == 112


SHAPES = [(1, 8, 256), (3, 24, 130), (8, 136, 1024), (16, 64, 4096 + 64), (17, 40, 512), (5, 8, 2)]


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("scaled", [False, True])
def test_int4_gemm_cpu_exact(m, n, k, scaled, rng):
    a, q, gs, w8 = int4_case(m, n, k, scaled, rng)
    got = tcgemm.int4_gemm(a, pack(q), gs)
    expected = gemm_reference(a, w8.t())
    assert expected.ne(0).any()
    assert torch.equal(got, expected)


# Shapes for the GPU: the few-rows kernel reads the packed bytes itself (forced "skinny", or the
# route of "auto"/sm80/sm90 at a few rows and a wide N, K >= 512); the rest unpack first.
GPU_SHAPES = SHAPES + [(1, 4096, 1024), (4, 2112, 4096), (16, 2048, 512 + 128 + 32), (2, 8, 96), (1, 4104, 14336)]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", GPU_SHAPES)
@pytest.mark.parametrize("scaled", [False, True])
def test_int4_gemm_gpu_exact_on_every_backend(gemm_backend, m, n, k, scaled, rng):
    a, q, gs, w8 = int4_case(m, n, k, scaled, rng)
    expected = gemm_reference(a, w8.t())
    a_cuda, gs_cuda = a.cuda(), None if gs is None else gs.cuda()
    got = tcgemm.int4_gemm(a_cuda, pack(q).cuda(), gs_cuda, backend=gemm_backend)
    assert torch.equal(got.cpu(), expected), f"{gemm_backend}: differs from the int64 reference"
    int8 = tcgemm.int8_gemm(a_cuda, w8.cuda().t(), backend=gemm_backend)
    assert torch.equal(got, int8)


# At most one 32-column tile per SM (up to 132 tiles on an H100) and K of at least 16 K blocks:
# on sm90 the few-rows kernel splits each tile's K between the two blocks of a cluster and adds
# their sums through distributed shared memory (dispatch/plan.cpp, plan_skinny_int4_split); a K
# tail, rows 1-16, x quantized in the kernel and not. Elsewhere the same shapes run unsplit.
SPLIT_SHAPES = [(1, 1024, 4096 + 32), (3, 200, 2048), (4, 2112, 4096 + 128), (16, 4096, 8192), (2, 40, 14336 + 64)]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", SPLIT_SHAPES)
def test_int4_k_split_between_the_blocks_of_a_cluster(m, n, k, rng):
    a = torch.randint(-128, 128, (m, k), generator=rng, dtype=I8)
    q = random_q4(n, k, rng)
    gs = random_group_scale(n, k, rng)
    w8 = unpacked(q, gs)
    got = tcgemm.int4_gemm(a.cuda(), pack(q).cuda(), gs.cuda(), backend="auto")
    assert torch.equal(got.cpu(), gemm_reference(a, w8.t()))
    x = torch.randn(m, k, generator=rng).to(torch.bfloat16).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    bias = torch.randn(n, generator=rng).cuda()
    for activation in ("token", "block"):
        y4, y8 = _quant_linear_pair(x, pack(q).cuda(), w8.cuda(), scale, gs.cuda(), "auto", bias=bias,
                                    activation=activation)
        assert torch.equal(y4, y8), activation


# More rows than the few-rows kernel's 16-row tiles. On sm90 (dispatch/plan.cpp): its 32-row tiles
# up to 32 rows, and up to 64 where the tiled kernel's tiles would not fill the SMs; the tiled
# kernel reading the packed weight and unpacking it in shared memory (kernels/sm90/sm90_unpack.cuh)
# at up to 512 rows where its tiles (64x128 up to 64 rows, 128x128 up to 128, 256x128 above; the
# next smaller where those are too few) fill the SMs and K is a multiple of 32 (TMA's 16-byte
# rows). On an H100/H200: 17 x 13576 and 33 x 4096 the 32-row tiles (33: two tile rows), 48 x
# 13000 64x128 tiles (a K tail), 100 x 13000 128x128, 128 x 8192 64x128 (two tile rows), 200 x
# 10000 128x128, 300 x 12840 and 500 x 7000 256x128, 256 x 12928 256x128 (K shorter than one K
# block); partial tiles in M and N. 2048 x 512 x 256: the int8 kernel, whose producer warps unpack
# the weight as it runs (prefill rows, kernels/sm90/sm90_unpack_ahead.cuh). 64 x 13000 x 130 goes
# through a separate unpacking pass: K not a multiple of 32.
SM90_SHAPES = [(17, 13576, 2048 + 32), (33, 4096, 4096), (48, 13000, 4096 + 96), (100, 13000, 2080),
               (128, 8192, 1024), (200, 10000, 1024 + 64), (300, 12840, 160), (256, 12928, 128), (500, 7000, 96),
               (64, 13000, 130), (2048, 512, 256)]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", SM90_SHAPES)
@pytest.mark.parametrize("scaled", [False, True])
def test_int4_gemm_more_rows_exact(m, n, k, scaled, rng):
    a, q, gs, w8 = int4_case(m, n, k, scaled, rng)
    got = tcgemm.int4_gemm(a.cuda(), pack(q).cuda(), None if gs is None else gs.cuda(), backend="auto")
    assert torch.equal(got.cpu(), gemm_reference(a, w8.t()))


def _kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


# The kernel each row count takes on a 132-SM Hopper (H100 SXM, H200; dispatch/plan.cpp): "w4" the
# W4 kernel (K a multiple of 128), "skinny" the few-rows kernel's 32-row tiles, else the tiled
# kernel's tile (BM, BN).
ROUTES = [((24, 28672, 4096), "w4"), ((100, 13000, 2048), "w4"), ((300, 8192, 8192), "w4"), ((60, 4096, 4096), "w4"),
          ((24, 13000, 2048), "skinny"), ((60, 4096, 2048), "skinny"), ((300, 13000, 2048), (256, 128)),
          ((512, 4096, 1024), (128, 128)), ((48, 13000, 2080), (64, 128)), ((100, 13000, 2080), (128, 128))]


@pytest.mark.gpu
@pytest.mark.parametrize("shape, route", ROUTES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v)
def test_packed_weight_route_by_rows(shape, route, rng):
    if "sm90" not in tcgemm.available_backends():
        pytest.skip("the sm90 kernel needs an sm_90 GPU and a build with sm_90a code")
    m, n, k = shape
    a, q, gs, w8 = int4_case(m, n, k, True, rng)
    a, packed, gs = a.cuda(), pack(q).cuda(), gs.cuda()
    names = _kernel_names(lambda: tcgemm.int4_gemm(a, packed, gs))
    assert torch.equal(tcgemm.int4_gemm(a, packed, gs).cpu(), gemm_reference(a.cpu(), w8.t()))
    assert not any("unpack_int4" in name for name in names), names
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        return  # the routes depend on how many tiles fill the SMs
    if route == "w4":
        assert any("sm90_w4_kernel" in name for name in names), names
    elif route == "skinny":
        assert any("skinny_gemm_kernel" in name for name in names), names
    else:
        tile = f"TileConfig<{route[0]}, {route[1]},"
        assert any("sm90_gemm_kernel" in name and tile in name for name in names), names


# The W4 kernel (17-512 rows, K a multiple of 128, where dispatch/plan.cpp's plan_sm90_w4 takes
# the shape on a 132-SM Hopper): each of its seven configs (32 and 64 rows of A one block per SM and
# two, 128 rows with two and with three consumer warpgroups (128 x 4096 and 129 x 300: 192 weight
# rows a tile, the last one partial; 300 and 512 rows: tiles of 128 rows three and four times), 256
# rows twice (500 x 8100)) with partial tiles of A and of the weight, K splits of 2 and 4 between
# the blocks of a cluster, and K blocks that do not divide between the splits (K = 8192 + 1152).
W4_SHAPES = [(17, 16384, 4096), (32, 8192, 8192), (20, 8192, 16384), (24, 28672, 4096), (30, 10240, 8192 + 1152),
             (33, 9000, 8192 + 1152), (64, 8192, 4096), (100, 13000, 2048), (128, 4096, 8192), (129, 300, 8192),
             (300, 5000, 8192 + 1152), (512, 1100, 8192), (500, 8100, 8192 + 1152)]


def require_w4_routes():
    """Skips unless the W4 kernel runs here and routes as on a 132-SM Hopper (H100 SXM, H200)."""
    if "sm90" not in tcgemm.available_backends():
        pytest.skip("the W4 kernel needs an sm_90 GPU and a build with sm_90a code")
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the W4 kernel's shapes are chosen by how its blocks fill 132 SMs")


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", W4_SHAPES)
@pytest.mark.parametrize("scaled", [False, True])
def test_w4_kernel_exact(m, n, k, scaled, rng):
    require_w4_routes()
    a, q, gs, w8 = int4_case(m, n, k, scaled, rng)
    a, packed = a.cuda(), pack(q).cuda()
    gs = None if gs is None else gs.cuda()
    names = _kernel_names(lambda: tcgemm.int4_gemm(a, packed, gs))
    assert any("sm90_w4_kernel" in name for name in names), names
    got = tcgemm.int4_gemm(a, packed, gs)
    # bit for bit the int8 GEMM of the unpacked weight, which test_gemm checks against int64
    assert torch.equal(got, tcgemm.int8_gemm(a, w8.cuda().t()))
    if m * n * k <= 2**31:
        assert torch.equal(got.cpu(), gemm_reference(a.cpu(), w8.t()))
    # A read through any strides: a transposed copy's view
    a_t = a.t().contiguous().t()
    assert torch.equal(tcgemm.int4_gemm(a_t, packed, gs), got)


@pytest.mark.gpu
def test_w4_shapes_run_every_config(rng):
    """W4_SHAPES reach all seven configs of the W4 kernel (kernels/sm90/configs.h), so that
    test_w4_kernel_exact checks each."""
    require_w4_routes()
    configs = set()
    for m, n, k in W4_SHAPES:
        a, q, gs, _ = int4_case(m, n, k, True, rng)
        a, packed, gs = a.cuda(), pack(q).cuda(), gs.cuda()
        for name in _kernel_names(lambda: tcgemm.int4_gemm(a, packed, gs)):
            configs.update(re.findall(r"W4Config<[^>]*>", name))
    assert len(configs) == 7, sorted(configs)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(48, 8192, 4096), (200, 3000, 8192), (300, 5000, 8192)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_w4_kernel_layer(m, n, k, out_dtype, rng):
    """quant_linear on the W4 kernel: bit for bit the same layer on the unpacked int8 weight, 2-D and
    3-D x, with a bias, and the int32 sums exact."""
    require_w4_routes()
    x, packed, gs, w8, scale, bias = two_level_layer_case(m, n, k, out_dtype, rng)
    names = _kernel_names(lambda: tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs, bias=bias))
    assert any("sm90_w4_kernel" in name for name in names), names
    # 16-bit x is quantized straight into the W4 kernel's K order; fp32 x takes the ordering pass
    assert any("w4_order_kernel" in name for name in names) == (out_dtype == torch.float32), names
    y4 = tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs, bias=bias)
    assert torch.equal(y4, tcgemm.quant_linear(x, w8, scale, bias=bias))
    x3 = x.reshape(2, m // 2, k) if m % 2 == 0 else x.reshape(1, m, k)
    y3 = tcgemm.quant_linear(x3, packed, scale, weight_group_scale=gs, bias=bias)
    assert torch.equal(y3.reshape(m, n), y4)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(24, 28672, 4096), (32, 8192, 28672), (64, 8192, 4096), (300, 5000, 8192)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_w4_layer_quantizes_x_in_the_kernels_order(m, n, k, dtype, rng):
    """x quantized per token straight into the W4 kernel's K order with its rows' sums (no ordering
    pass): bit for bit the layer on the int8 weight, with rows of NaN and inf (zeros and a NaN scale),
    SmoothQuant multipliers or rotated blocks, and x read through a row stride; rows of up to 28672
    values (one block a row); finite rows within bf16 / fp16 rounding of the float64 reference."""
    require_w4_routes()
    _, packed, gs, w8, scale, bias = two_level_layer_case(m, n, k, dtype, rng)
    x = torch.randn(m, k + 64, generator=rng).to(dtype).cuda()[:, 64:]  # rows k + 64 apart
    x[3, 5] = float("nan")
    x[m - 1, k - 1] = float("inf")
    smooth = (torch.rand(k, generator=rng) + 0.5).cuda()

    def layer(w, **kw):
        return tcgemm.quant_linear(x, w, scale, bias=bias, weight_group_scale=gs if w is packed else None, **kw)

    for kw in ({}, {"smooth": smooth}, {"rotate": True}):
        names = _kernel_names(lambda: layer(packed, **kw))
        assert any("sm90_w4_kernel" in name for name in names), names
        assert not any("w4_order_kernel" in name for name in names), names
        y4, y8 = layer(packed, **kw), layer(w8, **kw)
        assert y4.isnan().any(dim=1).tolist() == [i in (3, m - 1) for i in range(m)]
        torch.testing.assert_close(y4, y8, rtol=0, atol=0, equal_nan=True)
    # and the first rows against the float64 reference, within the output's rounding
    qx, sx = tcgemm.quantize(x[:3], "token")
    ref = tcgemm.reference.scaled_gemm_reference(qx.cpu(), w8.cpu().t(), sx.cpu(), scale.cpu(), bias.cpu(),
                                                 return_float64=True)
    y4 = layer(packed)[:3].double().cpu()
    assert torch.allclose(y4, ref, rtol=2**-7, atol=1e-3 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(24, 28672, 4096), (64, 8192, 4096), (100, 13000, 2048), (300, 5000, 8192)])
def test_w4_layer_reads_the_x_written_just_before_it(m, n, k, rng):
    """The W4 route's launches overlap the kernel before each (x's quantization, the pass that orders
    it, the W4 kernel, whose first weight copies go out before it waits): in a CUDA graph whose
    kernel right before the layer writes x, replayed on new inputs, every replay gives the bits of
    the layer on the int8 weight for those inputs."""
    require_w4_routes()
    _, packed, gs, w8, scale, bias = two_level_layer_case(m, n, k, torch.bfloat16, rng)
    src = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")

    def step():  # src * 2: a kernel that writes the layer's x just before it (exact in bf16)
        return tcgemm.quant_linear(src * 2, packed, scale, weight_group_scale=gs, bias=bias)

    src.copy_(torch.randn(m, k, generator=rng).bfloat16())
    assert any("sm90_w4_kernel" in name for name in _kernel_names(step)), "not on the W4 kernel"
    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = step()
    for _ in range(3):
        src.copy_(torch.randn(m, k, generator=rng).bfloat16())
        graph.replay()
        assert torch.equal(y, tcgemm.quant_linear(src * 2, w8, scale, bias=bias))


# The W4 kernel with fp32 weight scales per group of 128 (scheme "w4a8-group", the scales of most
# published 4-bit checkpoints): its configs of 32 and 64 rows, which promote every K block's sums
# into fp32 (dispatch/plan.cpp: plan_sm90_w4 with per_block), unsplit and with K splits of 2 and 4
# (uneven: K = 8192 + 1152), partial tiles of x and of the weight, and K past what one block's
# shared memory holds the scales of (28672: split).
W4_FLOAT_SHAPES = [(17, 28672, 4096), (24, 16384, 4096), (32, 8192, 8192), (33, 6144, 4096), (48, 4096, 14336),
                   (40, 9000, 8192 + 1152), (64, 10240, 8192 + 1152), (64, 8192, 28672)]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", W4_FLOAT_SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=str)
def test_w4_kernel_float_group_scales(m, n, k, out_dtype, rng):
    """quant_linear with fp32 group scales on the W4 kernel: the per-block layer of the unpacked int8
    weight up to the order of the fp32 sums (a K split adds its blocks' sums at the end), and the
    float64 reference within the rounding of the output; 2-D and 3-D x, a bias."""
    require_w4_routes()
    q = random_q4(n, k, rng)
    scale = (torch.rand(n, k // 128, generator=rng) * 0.01 + 1e-3).cuda()
    bias = torch.randn(n, generator=rng).cuda()
    x = torch.randn(m, k, generator=rng).to(out_dtype).cuda()  # the output takes x's dtype
    packed, w8 = pack(q).cuda(), q.cuda()

    def layer(x, w):
        return tcgemm.quant_linear(x, w, scale, bias=bias)

    names = _kernel_names(lambda: layer(x, packed))
    assert any("sm90_w4_kernel" in name for name in names), names
    assert not any("unpack_int4" in name for name in names), names
    y4, y8 = layer(x, packed), layer(x, w8)
    assert y4.dtype == out_dtype and y4.shape == (m, n)
    if out_dtype == torch.float32:
        torch.testing.assert_close(y4, y8, rtol=1e-5, atol=1e-5 * y8.abs().max().item())
    else:
        torch.testing.assert_close(y4.float(), y8.float(), rtol=2**-7, atol=2**-7 * y8.abs().max().item())
    qx, sx = tcgemm.quantize(x, "token")
    ref = tcgemm.reference.scaled_gemm_reference(qx.cpu(), w8.cpu().t(), sx.cpu(), scale.cpu(), bias.cpu(),
                                                 return_float64=True)
    assert torch.allclose(y4.double().cpu(), ref, rtol=2**-7, atol=1e-3 * ref.abs().max().item())
    x3 = x.reshape(2, m // 2, k) if m % 2 == 0 else x.reshape(1, m, k)
    assert torch.equal(layer(x3, packed).reshape(m, n), y4)


@pytest.mark.gpu
def test_w4_kernel_float_group_scales_graph_and_compile(rng):
    """The W4 kernel's promoting path under torch.compile (fullgraph) and in a CUDA graph replayed
    on new x: the bits of the eager call."""
    require_w4_routes()
    m, n, k = 48, 8192, 4096
    packed = pack(random_q4(n, k, rng)).cuda()
    scale = (torch.rand(n, k // 128, generator=rng) * 0.01 + 1e-3).cuda()
    x = torch.randn(m, k, generator=rng).bfloat16().cuda()

    def layer(t):
        return tcgemm.quant_linear(t, packed, scale)

    assert any("sm90_w4_kernel" in name for name in _kernel_names(lambda: layer(x))), "not on the W4 kernel"
    eager = layer(x)
    assert torch.equal(torch.compile(layer, fullgraph=True)(x), eager)
    graph = torch.cuda.CUDAGraph()
    static_x = x.clone()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    x2 = torch.randn(m, k, generator=rng).bfloat16().cuda()
    static_x.copy_(x2)
    graph.replay()
    assert torch.equal(static_y, layer(x2))


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(256, 14336, 4096 + 64), (37, 13576, 1024 + 32)])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16], ids=str)
def test_sm90_reads_the_packed_weight_in_place(m, n, k, out_dtype, rng):
    if "sm90" not in tcgemm.available_backends():
        pytest.skip("the sm90 kernel needs an sm_90 GPU and a build with sm_90a code")
    x, packed, gs, w8, scale, bias = two_level_layer_case(m, n, k, out_dtype, rng)
    names = _kernel_names(lambda: tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs, bias=bias))
    assert not any("unpack_int4" in name for name in names), names
    assert any("sm90_gemm_kernel" in name for name in names), names
    y4 = tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs, bias=bias)
    assert torch.equal(y4, tcgemm.quant_linear(x, w8, scale, bias=bias))
    a = torch.randint(-128, 128, (m, k), generator=rng, dtype=I8).cuda()
    assert torch.equal(tcgemm.int4_gemm(a, packed, gs), tcgemm.int8_gemm(a, w8.t()))
    # float group scales promote each K block in the epilogue: those run the unpacked weight
    fscale = (torch.rand(n, (k + 127) // 128, generator=rng) * 0.01 + 1e-3).cuda()
    names = _kernel_names(lambda: tcgemm.quant_linear(x, packed, fscale))
    assert any("unpack_int4" in name for name in names), names


# The int8 sm90 kernel unpacking the weight as it runs (prefill: 2048 to 3071 rows, or more with
# K >= 8192, dispatch/plan.cpp). Partial column tiles and tile rows, K ending inside a segment of
# 1024 values and inside a K block, one segment, long K (9 segments, bands of 6 column tiles), few
# column tiles (one band) and many.
IN_GEMM_SHAPES = [(2048, 5000, 4096 + 96), (2100, 300, 2080), (3100, 1000, 8192 + 32), (2048, 512, 256),
                  (2500, 13000, 1024)]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", IN_GEMM_SHAPES)
@pytest.mark.parametrize("scaled", [False, True])
def test_sm90_unpacks_the_weight_inside_the_gemm(m, n, k, scaled, rng):
    if "sm90" not in tcgemm.available_backends():
        pytest.skip("the sm90 kernel needs an sm_90 GPU and a build with sm_90a code")
    a, q, gs, w8 = int4_case(m, n, k, scaled, rng)
    a, packed, w8 = a.cuda(), pack(q).cuda(), w8.cuda()
    gs = None if gs is None else gs.cuda()
    names = _kernel_names(lambda: tcgemm.int4_gemm(a, packed, gs))
    assert not any("unpack_int4" in name for name in names), names
    assert any("sm90_gemm_kernel" in name for name in names), names
    # bit for bit the int8 GEMM of the unpacked weight, which test_gemm checks against int64
    expected = tcgemm.int8_gemm(a, w8.t())
    for _ in range(2):  # the flags start from zero on every call
        assert torch.equal(tcgemm.int4_gemm(a, packed, gs), expected)
    if m * n * k <= 2**31:
        assert torch.equal(expected.cpu(), gemm_reference(a.cpu(), w8.t().cpu()))
    x = torch.randn(m, k, generator=rng).to(torch.bfloat16).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    y4 = tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs)
    assert torch.equal(y4, tcgemm.quant_linear(x, w8, scale))


@pytest.mark.gpu
def test_sm90_unpacking_gemm_in_a_cuda_graph(rng):
    """Replays reset the flags (a fill in the graph) and write the weight again."""
    if "sm90" not in tcgemm.available_backends():
        pytest.skip("the sm90 kernel needs an sm_90 GPU and a build with sm_90a code")
    m, n, k = 2048, 2048 + 96, 2048
    _, q, gs, w8 = int4_case(m, n, k, True, rng)
    packed, gs, w8 = pack(q).cuda(), gs.cuda(), w8.cuda()
    x = torch.randn(m, k, generator=rng).to(torch.bfloat16).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    expected = tcgemm.quant_linear(x, w8, scale)
    tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs)
    for _ in range(3):
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, expected)


@pytest.mark.gpu
def test_sm90_unpacking_gemm_back_to_back(rng):
    """quant_linear at prefill rows, layers back to back on fresh inputs (each call's buffer and
    flags against the last's), the group scales contiguous and as a column-major view: each equal
    to the int8 layer of the unpacked weight."""
    if "sm90" not in tcgemm.available_backends():
        pytest.skip("the sm90 kernel needs an sm_90 GPU and a build with sm_90a code")
    m, n, k = 2048, 1000 + 24, 2048 + 64
    _, q, gs, w8 = int4_case(m, n, k, True, rng)
    packed, w8 = pack(q).cuda(), w8.cuda()
    group_scales = [gs.cuda(), gs.t().contiguous().cuda().t()]
    assert not group_scales[1].is_contiguous()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    xs = [torch.randn(m, k, generator=rng).to(torch.bfloat16).cuda() for _ in range(3)]
    expected = [tcgemm.quant_linear(x, w8, scale) for x in xs]
    got = [tcgemm.quant_linear(x, packed, scale, weight_group_scale=g) for g in group_scales for x in xs]
    for i, y in enumerate(got):
        assert torch.equal(y, expected[i % len(xs)]), i


@pytest.mark.gpu
@pytest.mark.parametrize("row0, col0", [(0, 0), (3, 0), (5, 8)])
def test_sm90_unpacking_gemm_reads_views(row0, col0, rng):
    """Prefill rows on a packed weight that is a slice of a larger one: rows from an offset, and K
    shorter than the parent's (rows further apart than K/2 bytes). A base that is not 16-byte
    aligned (col0 = 8 bytes) takes the separate unpacking pass; the others are unpacked in the GEMM."""
    if "sm90" not in tcgemm.available_backends():
        pytest.skip("the sm90 kernel needs an sm_90 GPU and a build with sm_90a code")
    m, n, k = 2048, 600, 1024
    parent = random_q4(n + 8, 2 * k, rng)
    q = parent[row0:row0 + n, 2 * col0:2 * col0 + k]
    packed = pack(parent).cuda()[row0:row0 + n, col0:col0 + k // 2]
    gs = random_group_scale(n, k, rng)
    a = torch.randint(-128, 128, (m, k), generator=rng, dtype=I8)
    names = _kernel_names(lambda: tcgemm.int4_gemm(a.cuda(), packed, gs.cuda()))
    assert any("unpack_int4" in name for name in names) == (col0 % 16 != 0), names
    got = tcgemm.int4_gemm(a.cuda(), packed, gs.cuda())
    assert torch.equal(got.cpu(), gemm_reference(a, unpacked(q, gs).t()))


@pytest.mark.gpu
def test_int4_gemm_gpu_reads_views_and_offsets(rng):
    # A packed weight that is a row slice of a larger one (base 16-byte aligned or not).
    k = 1024
    q = random_q4(4200, k, rng)
    packed = pack(q).cuda()
    a = torch.randint(-128, 128, (2, k), generator=rng, dtype=I8)
    for rows in (slice(0, 4096), slice(1, 4097), slice(3, 4099)):
        got = tcgemm.int4_gemm(a.cuda(), packed[rows], backend="skinny")
        assert torch.equal(got.cpu(), gemm_reference(a, q[rows].t()))


def _quant_linear_pair(x, packed, w8, scale, gs, backend, **kwargs):
    y4 = tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs, backend=backend, **kwargs)
    y8 = tcgemm.quant_linear(x, w8, scale, backend=backend, **kwargs)
    return y4, y8


@pytest.mark.parametrize("rows", [1, 3, 16, 70])
@pytest.mark.parametrize("two_level", [True, False])
def test_quant_linear_4bit_equals_the_unpacked_weight_cpu(rows, two_level, rng):
    n, k = 48, 384
    q = random_q4(n, k, rng)
    x = torch.randn(rows, k, generator=rng).to(torch.bfloat16)
    bias = torch.randn(n, generator=rng)
    if two_level:
        gs = random_group_scale(n, k, rng)
        scale = torch.rand(n, generator=rng) * 0.01 + 1e-3
    else:
        gs, scale = None, torch.rand(n, (k + 127) // 128, generator=rng) * 0.01 + 1e-3
    y4, y8 = _quant_linear_pair(x, pack(q), unpacked(q, gs), scale, gs, "auto", bias=bias)
    assert y4.dtype == torch.bfloat16 and y4.shape == (rows, n)
    assert torch.equal(y4, y8)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 2, 4, 7, 16, 300])
@pytest.mark.parametrize("two_level", [True, False])
@pytest.mark.parametrize("activation", ["token", "block"])
def test_quant_linear_4bit_equals_the_unpacked_weight_gpu(scaled_backend, rows, two_level, activation, rng):
    n, k = 4096, 1024 + 128  # wide enough for the few-rows route
    q = random_q4(n, k, rng)
    x = torch.randn(rows, k, generator=rng).to(torch.bfloat16).cuda()
    bias = torch.randn(n, generator=rng).cuda()
    if two_level:
        gs = random_group_scale(n, k, rng).cuda()
        scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    else:
        gs, scale = None, (torch.rand(n, (k + 127) // 128, generator=rng) * 0.01 + 1e-3).cuda()
    if not tcgemm.supports(scaled_backend, "quant_linear", tcgemm.QuantScheme(
            activations=tcgemm.ActivationArgs("group" if activation == "block" else "token"),
            weights=tcgemm.WeightArgs("channel" if two_level else "group"))):
        pytest.skip(f"{scaled_backend} does not run these scales")
    w8 = unpacked(q.cuda(), gs)
    y4, y8 = _quant_linear_pair(x, pack(q).cuda(), w8, scale, gs, scaled_backend, bias=bias, activation=activation)
    assert torch.equal(y4, y8)
    # and the float64 reference of the same int8 weight, within the rounding of bf16
    qx, sx = tcgemm.quantize(x, "group" if activation == "block" else "token")
    ref = tcgemm.reference.scaled_gemm_reference(qx.cpu(), w8.cpu().t(), sx.cpu(), scale.cpu(), bias.cpu(),
                                                 return_float64=True)
    assert torch.allclose(y4.double().cpu(), ref, rtol=2**-7, atol=1e-3 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("activation", ["token", "block"])
@pytest.mark.parametrize("m,k", [(1, 8192), (1, 8320), (1, 14336), (2, 4096), (3, 2048), (4, 2048), (4, 2176)],
                         ids=str)
def test_quant_linear_4bit_one_kernel_at_a_few_rows(m, k, activation, dtype, rng):
    """Against a packed 4-bit weight too, the skinny GEMM quantizes up to 4 rows of x itself when
    they take at most FUSED_VECTORS_PER_THREAD vectors per thread: one kernel, the bits of the
    unpacked int8 weight's layer. Beyond that, two kernels and the same bits."""
    n = 8448  # more 32-column tiles than blocks: a block takes several
    vec = 16 // dtype.itemsize
    if activation == "block":  # a group of 128 values takes 128 / vec lanes
        fits = m * -(-k // 128) * (128 // vec) <= FUSED_VECTORS_PER_THREAD * 256
    else:  # each of the 256 threads holds FUSED_VECTORS_PER_THREAD // m vectors of each row
        fits = -(-k // vec // 256) <= FUSED_VECTORS_PER_THREAD // m
    q = random_q4(n, k, rng)
    gs = random_group_scale(n, k, rng).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    x = torch.randn(m, k, generator=rng).to(dtype).cuda()
    packed, w8 = pack(q).cuda(), unpacked(q.cuda(), gs)
    y4, y8 = _quant_linear_pair(x, packed, w8, scale, gs, "auto", activation=activation)
    assert torch.equal(y4, y8)
    kernels = cuda_kernels(lambda: tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs, activation=activation))
    assert len(kernels) == (1 if fits else 2), kernels


def _one_row_split(n, k):
    """The cluster blocks that share each tile's K at one row against a two-level 4-bit weight
    (csrc/dispatch/plan.cpp, plan_skinny_int4_split): 2 on sm90 where the 32-column tiles are at
    most one per SM and K has at least 16 K blocks of 128."""
    props = torch.cuda.get_device_properties(0)
    tiles = -(-n // 32)
    sm90 = "sm90" in tcgemm.available_backends()
    return 2 if sm90 and tiles <= props.multi_processor_count and k // 128 >= 16 else 1


@pytest.mark.gpu
@pytest.mark.parametrize("k, dtype", [(14336, torch.bfloat16), (16384, torch.float16), (8224, torch.bfloat16),
                                      (8192, torch.float32), (8224, torch.float32), (16512, torch.bfloat16)],
                         ids=str)
@pytest.mark.parametrize("bad", [None, "inf", "nan"])
def test_quant_linear_4bit_one_row_quantized_in_parts_across_a_cluster(k, dtype, bad, rng):
    """One row against a two-level 4-bit weight whose tiles split K between the two blocks of a
    cluster: where the row takes more than 4 vectors per thread, each block quantizes only the
    chunks of x (8 K blocks each, the ranks in turn) its warps read, and the row's amax joins
    through distributed shared memory (fp32 8192: the whole row in each block). So a row of up to
    4 vectors per thread per block (16384 bf16 values: 8B down's 14336) takes one kernel, with the
    bits of tcgemm.quantize: the same output as the unpacked int8 weight's layer (two kernels),
    also where a non-finite value sits in the other block's chunks. A partial last chunk and a K
    tail (8224), fp32 x (chunks of 256 vectors) and rows too long for one kernel (16512; fp32 8224)."""
    n = 4096  # 128 tiles of 32 columns
    vec = 16 // dtype.itemsize
    split = _one_row_split(n, k)
    chunk = 8 * 128 // vec
    nvec = k // vec
    whole = nvec <= FUSED_VECTORS_PER_THREAD * 256  # then every block quantizes the whole row
    most = nvec if split == 1 or whole else -(-(-(-nvec // chunk)) // split) * chunk
    fits = -(-most // 256) <= FUSED_VECTORS_PER_THREAD
    q = random_q4(n, k, rng)
    gs = random_group_scale(n, k, rng).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    bias = torch.randn(n, generator=rng).cuda()
    x = torch.randn(1, k, generator=rng).to(dtype)
    x[0, 1024 + 5] *= 40  # the amax in the chunk of rank 1
    if bad is not None:
        x[0, k - 3] = float(bad)
    x = x.cuda()
    packed, w8 = pack(q).cuda(), unpacked(q.cuda(), gs)
    y4, y8 = _quant_linear_pair(x, packed, w8, scale, gs, "auto", bias=bias)
    torch.testing.assert_close(y4, y8, rtol=0, atol=0, equal_nan=True)
    if bad is None:
        assert y4.isfinite().all()
        qx, sx = tcgemm.quantize(x, "token")
        ref = tcgemm.reference.scaled_gemm_reference(qx.cpu(), w8.cpu().t(), sx.cpu(), scale.cpu(), bias.cpu(),
                                                     return_float64=True)
        assert torch.allclose(y4.double().cpu(), ref, rtol=2**-7, atol=1e-3 * ref.abs().max().item())
    kernels = cuda_kernels(lambda: tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs, bias=bias))
    assert len(kernels) == (1 if fits else 2), (split, kernels)


@pytest.mark.gpu
def test_quant_linear_4bit_static_and_smooth_gpu(rng):
    n, k = 4096, 2048
    q = random_q4(n, k, rng)
    gs = random_group_scale(n, k, rng).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    smooth = (torch.rand(k, generator=rng) + 0.5).cuda()
    for rows in (1, 4, 64):
        x = torch.randn(rows, k, generator=rng).half().cuda()
        kw = dict(activation="static", input_scale=torch.tensor(0.03, device="cuda"), smooth=smooth)
        y4, y8 = _quant_linear_pair(x, pack(q).cuda(), unpacked(q.cuda(), gs), scale, gs, "auto", **kw)
        assert torch.equal(y4, y8)


@pytest.mark.parametrize("dev", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_quant_linear_4bit_asymmetric(dev, rng):
    n, k = 256, 512
    q = random_q4(n, k, rng)
    gs = random_group_scale(n, k, rng).to(dev)
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).to(dev)
    x = (torch.rand(5, k, generator=rng) * 3).to(dev)  # not centred on 0
    w8 = unpacked(q.to(dev), gs)
    y4, y8 = _quant_linear_pair(x, pack(q).to(dev), w8, scale, gs, "auto", asymmetric=True)
    assert torch.equal(y4, y8)


def test_group_scale_values_checked_on_cpu(rng):
    q = random_q4(8, 256, rng)
    for bad in (0, 17, -3):
        gs = torch.full((8, 2), bad, dtype=I8)
        with pytest.raises(ValueError, match=r"argument 'group_scale' must hold values in \[1, 16\]"):
            tcgemm.unpack_int4(pack(q), gs)
        with pytest.raises(ValueError, match=r"argument 'weight_group_scale' must hold values in \[1, 16\]"):
            tcgemm.quant_linear(torch.randn(2, 256), pack(q), torch.ones(8), weight_group_scale=gs)


def test_bad_packed_weights_name_the_argument(rng):
    x = torch.randn(2, 256)
    with pytest.raises(ValueError, match=r"'weight' \(4-bit\) must have shape \[N, K/2\] = \[8, 128\]"):
        tcgemm.quant_linear(x, torch.zeros(8, 256, dtype=U8), torch.ones(8))
    with pytest.raises(ValueError, match="K .the last dimension of 'x'. must be even"):
        tcgemm.quant_linear(torch.randn(2, 255), torch.zeros(8, 127, dtype=U8), torch.ones(8))
    with pytest.raises(TypeError, match="'weight' must have dtype torch.int8, got torch.int32"):
        tcgemm.quant_linear(x, torch.zeros(8, 32, dtype=torch.int32), torch.ones(8))
    with pytest.raises(ValueError, match=r"'weight_group_scale' must have shape \[N, ceil\(K/128\)\] = \[8, 2\]"):
        tcgemm.quant_linear(x, torch.zeros(8, 128, dtype=U8), torch.ones(8),
                            weight_group_scale=torch.ones(8, 1, dtype=I8))
    with pytest.raises(ValueError, match="needs a per-channel 'weight_scale'"):
        tcgemm.quant_linear(x, torch.zeros(8, 128, dtype=U8), torch.ones(8, 2),
                            weight_group_scale=torch.ones(8, 2, dtype=I8))


def test_opcheck(rng):
    q = random_q4(16, 256, rng)
    gs = random_group_scale(16, 256, rng)
    a = torch.randint(-128, 128, (3, 256), generator=rng, dtype=I8)
    torch.library.opcheck(torch.ops.tcgemm.unpack_int4.default, (pack(q), gs))
    torch.library.opcheck(torch.ops.tcgemm.gemm_int4.default, (a, pack(q), gs, "auto"))
    x = torch.randn(3, 256)
    torch.library.opcheck(torch.ops.tcgemm.quant_linear.default,
                          (x, pack(q), torch.rand(16) + 0.1, None, "token", None, None, "auto", False, None, None, gs))


@pytest.mark.gpu
def test_quant_linear_4bit_cuda_graph_and_compile(rng):
    n, k = 4096, 4096
    q = random_q4(n, k, rng)
    packed, gs = pack(q).cuda(), random_group_scale(n, k, rng).cuda()
    scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).cuda()
    x = torch.randn(1, k, generator=rng).bfloat16().cuda()
    eager = tcgemm.quant_linear(x, packed, scale, weight_group_scale=gs)
    compiled = torch.compile(lambda t: tcgemm.quant_linear(t, packed, scale, weight_group_scale=gs), fullgraph=True)
    assert torch.equal(compiled(x), eager)
    graph = torch.cuda.CUDAGraph()
    static_x = x.clone()
    with torch.cuda.graph(graph):
        static_y = tcgemm.quant_linear(static_x, packed, scale, weight_group_scale=gs)
    x2 = torch.randn(1, k, generator=rng).bfloat16().cuda()
    static_x.copy_(x2)
    graph.replay()
    assert torch.equal(static_y, tcgemm.quant_linear(x2, packed, scale, weight_group_scale=gs))

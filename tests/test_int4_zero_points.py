"""Asymmetric 4-bit weights: a zero point per 1x128 group (scheme "w4a8-group-asymmetric", what
AWQ and llm-compressor's W4A16_ASYM checkpoints hold), kept packed at 4 bits.

The contract: the int8 weight the GEMM computes with is ``q - zero_point`` per group (in [-15,
15]), so a layer with zero points equals, bit for bit on the same backend, the layer of that int8
weight with the same fp32 scales, which is exact against the int64 reference up to the rounding
of its fp32 epilogue. Packing and the expected values here are written independently of the
library.
"""

import pytest
import torch

import tcgemm
from cases import assert_int8_layer_of_less_zero_points, assert_replays_in_a_cuda_graph
from tcgemm.reference import quantize_reference, scaled_gemm_reference

U8, I8 = torch.uint8, torch.int8


def pack(q: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] in [-8, 7] -> uint8 [N, K/2]: k = 2j in the low nibble of byte j, 2j + 1 high."""
    lo, hi = q[:, 0::2].to(torch.int16) & 0xF, q[:, 1::2].to(torch.int16) & 0xF
    return (lo | (hi << 4)).to(U8)


def less_zero_points(q: torch.Tensor, zp: torch.Tensor) -> torch.Tensor:
    """q - zp per 1x128 group, as int8."""
    return (q.to(torch.int16) - zp.to(torch.int16).repeat_interleave(128, dim=1)[:, :q.shape[1]]).to(I8)


def case(n, k, rng):
    q = torch.randint(-8, 8, (n, k), generator=rng, dtype=I8)
    zp = torch.randint(-8, 8, (n, (k + 127) // 128), generator=rng, dtype=I8)
    return q, zp


@pytest.mark.parametrize("n, k", [(7, 2), (40, 384), (33, 250), (128, 1024)])
def test_unpack_subtracts_the_zero_points(n, k, device, rng):
    """Every value of the int8 weight is q - zero_point of its group, both extremes included
    (-8 - 7 = -15 and 7 - (-8) = 15), ragged last groups too."""
    q, zp = case(n, k, rng)
    q[0, 0], zp[0, 0], q[-1, -1], zp[-1, -1] = -8, 7, 7, -8
    got = tcgemm.unpack_int4(pack(q).to(device), zero_point=zp.to(device))
    want = less_zero_points(q, zp)
    assert got.dtype == I8 and got.shape == (n, k) and got.is_contiguous()
    assert torch.equal(got.cpu(), want)
    assert int(want.min()) == -15 and int(want.max()) == 15


def test_zero_points_out_of_range_are_named(rng):
    """On CPU tensors the ops read the zero points' values: outside [-8, 7] is a ValueError naming
    the argument and the range (q - z would no longer be the weight the format means)."""
    q, zp = case(8, 256, rng)
    packed = pack(q)
    for bad in (torch.full_like(zp, 8), torch.full_like(zp, -9)):
        lo = int(bad.min())
        message = (rf"tcgemm.unpack_int4: argument 'zero_point' must hold values in \[-8, 7\] \(the zero points of "
                   rf"4-bit values\), got values in \[{lo}, {lo}\]")
        with pytest.raises(ValueError, match=message):
            tcgemm.unpack_int4(packed, zero_point=bad)
        with pytest.raises(ValueError, match=r"tcgemm.quant_linear: argument 'weight_zero_point' must hold values in "
                                             r"\[-8, 7\]"):
            tcgemm.quant_linear(torch.randn(2, 256), packed, torch.ones(8, 2), weight_zero_point=bad)


@pytest.mark.parametrize("m", [1, 4, 16, 17, 64, 300])
@pytest.mark.parametrize("n, k", [(96, 512), (200, 1024 + 256)])
@pytest.mark.parametrize("per_group", [True, False], ids=["group-scales", "channel-scales"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=str)
def test_quant_linear_with_zero_points(m, n, k, per_group, out_dtype, device, rng):
    """quant_linear of the packed weight and its zero points against quant_linear of the int8
    weight q - zero_point: bit for bit where the weight is unpacked first (the CPU; per-channel
    scales), up to the order of the fp32 sums where the few-rows kernel may read it in place (fp32
    group scales on a GPU); 2-D and 3-D, and the float64 reference
    within the output's rounding."""
    q, zp = case(n, k, rng)
    w8 = less_zero_points(q, zp)
    shape = (n, (k + 127) // 128) if per_group else (n,)
    scale = (torch.rand(*shape, generator=rng) * 0.01 + 1e-3).to(device)
    bias = torch.randn(n, generator=rng).to(device)
    x = torch.randn(m, k, generator=rng).to(out_dtype).to(device)
    packed, zp, w8 = pack(q).to(device), zp.to(device), w8.to(device)
    y4 = tcgemm.quant_linear(x, packed, scale, bias, weight_zero_point=zp)
    y8 = tcgemm.quant_linear(x, w8, scale, bias)
    assert y4.dtype == out_dtype and y4.shape == (m, n)
    if device == "cpu" or not per_group:
        assert torch.equal(y4, y8)
    else:
        tol = 2**-7 if out_dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(y4, y8, rtol=tol, atol=tol * float(y8.float().abs().max()))
    qx, sx = quantize_reference(x.float().cpu(), "token")
    ref = scaled_gemm_reference(qx, w8.cpu().t(), sx, scale.cpu(), bias.cpu(), return_float64=True)
    tol = 2**-7 if out_dtype == torch.bfloat16 else 1e-5
    assert torch.allclose(y4.double().cpu(), ref, rtol=tol, atol=tol * float(ref.abs().max()))
    x3 = x.reshape(2, m // 2, k) if m % 2 == 0 else x.reshape(1, m, k)
    assert torch.equal(tcgemm.quant_linear(x3, packed, scale, bias, weight_zero_point=zp).reshape(m, n), y4)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 8, 16])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1024, 14336), (200, 1024 + 256)])
def test_few_rows_read_the_zero_points_in_place(m, n, k, rng):
    """At up to 16 rows with fp32 group scales the few-rows kernel reads the packed weight and its
    zero points as they are (no unpacking kernel runs; x quantized in the kernel at up to 4 rows),
    each K block's sums less zero point times the block's row sums of x before their promotion:
    bit for bit the layer of the int8 weight q - zero_point up to the order of its fp32 sums."""
    q, zp = case(n, k, rng)
    scale = (torch.rand(n, (k + 127) // 128, generator=rng) * 0.01 + 1e-3).cuda()
    x = torch.randn(m, k, generator=rng).cuda()
    packed, zp, w8 = pack(q).cuda(), zp.cuda(), less_zero_points(q, zp).cuda()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        y4 = tcgemm.quant_linear(x, packed, scale, weight_zero_point=zp)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("skinny_gemm_kernel" in name for name in names) and not any("unpack" in name for name in names), names
    y8 = tcgemm.quant_linear(x, w8, scale)
    torch.testing.assert_close(y4, y8, rtol=1e-5, atol=1e-5 * float(y8.abs().max()))
    qx, sx = quantize_reference(x.cpu(), "token")
    ref = scaled_gemm_reference(qx, w8.cpu().t(), sx, scale.cpu(), None, return_float64=True)
    assert torch.allclose(y4.double().cpu(), ref, rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


def test_quantize_weight_asymmetric_rule():
    """Per group: lo = min(w, 0), hi = max(w, 0), scale = (hi - lo) / 15, zero_point =
    round(-8 - lo / scale), q = clamp(round(w / scale) + zero_point, -8, 7); the group's ends are
    met exactly; a zero group gets scale 1 and zero point -8 (lo = 0), so its q - zero_point is 0."""
    w = torch.zeros(3, 256)
    w[0, :128] = torch.linspace(-1.0, 2.0, 128)  # lo -1, hi 2: scale 0.2, zero point round(-3) = -3
    w[1, 128:] = torch.linspace(0.5, 3.5, 128)  # lo 0 (clamped), hi 3.5: zero point -8
    packed, scale, none, zp = tcgemm.weights.quantize_weight(w, "group", bits=4, symmetric=False)
    assert none is None and packed.dtype == U8 and zp.dtype == I8 and scale.shape == zp.shape == (3, 2)
    assert scale[0, 0].item() == pytest.approx(0.2) and int(zp[0, 0]) == -3
    assert scale[1, 1].item() == pytest.approx(3.5 / 15) and int(zp[1, 1]) == -8
    assert float(scale[2, 0]) == 1.0 and int(zp[2, 0]) == -8  # an all-zero group
    deq = tcgemm.unpack_int4(packed, zero_point=zp).float() * scale.repeat_interleave(128, dim=1)
    assert deq[0, 0].item() == pytest.approx(-1.0) and deq[0, 127].item() == pytest.approx(2.0)
    step = scale.repeat_interleave(128, dim=1)
    assert bool(((deq - w).abs() <= step / 2 + 1e-6).all())
    for bad, match in [(dict(granularity="channel"), "weights are asymmetric 4-bit per channel"),
                       (dict(bits=8), "weights are asymmetric 8-bit per group"),
                       (dict(grid="amax"), "no gptq= or grid=")]:
        args = dict(granularity="group", bits=4) | bad
        with pytest.raises(ValueError, match=match):
            tcgemm.weights.quantize_weight(w, args.pop("granularity"), symmetric=False, **args)


def test_asymmetric_layer(device, rng):
    """QuantLinear.from_linear with "w4a8-group-asymmetric": the zero points in the layer and its
    state dict, the dequantized weight within half a step of the float one, the output that of the
    int8 layer of q - zero_point (bit for bit on the CPU, up to the order of the fp32 sums on the GPU,
    whose few-rows kernel reads the packed weight in place), a state dict that round-trips, zero points outside [-8, 7]
    refused on load and on assignment, torch.compile the same bits."""
    linear = torch.nn.Linear(384, 72).to(device)
    with torch.no_grad():  # rows off centre, so that the zero points differ from group to group
        linear.weight.add_(torch.linspace(-0.05, 0.05, 72, device=device).reshape(-1, 1))
    layer = tcgemm.QuantLinear.from_linear(linear, scheme="w4a8-group-asymmetric")
    assert layer.weight.shape == (72, 192) and layer.weight_zero_point.shape == (72, 3)
    assert "weight_zero_point=True" in repr(layer) and len(layer.weight_zero_point.unique()) > 1
    step = layer.weight_scale.repeat_interleave(128, dim=1)
    assert bool(((layer.dequantize_weight() - linear.weight).abs() <= step / 2 + 1e-6).all())
    x = torch.randn(2, 5, 384, generator=rng).to(device)
    y = layer(x)
    assert_int8_layer_of_less_zero_points(y, x, layer)
    state = layer.state_dict()
    assert sorted(state) == ["bias", "weight", "weight_scale", "weight_zero_point"]
    again = tcgemm.QuantLinear(384, 72, scheme="w4a8-group-asymmetric", device=device)
    again.load_state_dict(state)
    assert torch.equal(again(x), y)
    with pytest.raises(ValueError, match=r"'weight_zero_point' must hold values in \[-8, 7\], got values in"):
        again.load_state_dict({**state, "weight_zero_point": state["weight_zero_point"] + 9})
    with pytest.raises(ValueError, match=r"argument 'weight_zero_point' must hold values in \[-8, 7\]"):
        again.weight_zero_point = torch.full((72, 3), -9, dtype=I8, device=device)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(layer, fullgraph=True)(x), y)


@pytest.mark.gpu
def test_asymmetric_layer_in_a_cuda_graph(rng):
    """The layer replays in a CUDA graph with the output of its eager call."""
    layer = tcgemm.QuantLinear.from_linear(torch.nn.Linear(1024, 256).cuda(), scheme="w4a8-group-asymmetric")
    x = torch.randn(16, 1024, generator=rng).cuda()
    want = layer(x)
    assert_replays_in_a_cuda_graph(lambda: layer(x), want)

"""Symmetric 4-bit weights with fp32 scales per group of 32 or 64 input features (schemes
"w4a8-group32" and "w4a8-group64", what many GPTQ and llm-compressor checkpoints hold), kept
packed at 4 bits.

The contract: tcgemm.quant_linear with a packed weight [N, K/2] and an fp32 table [N, ceil(K/gs)]
(no int8 group scales, no zero points; the group size read off the table's width) computes the
exact int32 sum of int8(x) * q over each group of gs inputs and promotes it with
``scale_x[m] * weight_scale[n, group]`` in fp32. Compared with a float64 reference that sums
each group in int64, within the rounding of the output dtype (the tolerance of the group-128
tests). At more than tcgemm.int4.GROUPED_KERNEL_ROWS rows on a GPU the layer computes by phases
of GEMMs with scales per 128 inputs: the op's result up to the order of the fp32 sums. Packing
and the expected values here are written independently of the library.
"""

import dataclasses
import pickle

import pytest
import torch

import tcgemm
from cases import assert_replays_in_a_cuda_graph
from tcgemm.int4 import GROUPED_KERNEL_ROWS, grouped_linear_by_phases
from tcgemm.reference import int4_weight_reference, quantize_reference, scaled_gemm_reference

U8, I8 = torch.uint8, torch.int8
SIZES = (32, 64)
# Tolerance of an output of x's dtype against the float64 reference: the output's rounding.
TOL = {torch.bfloat16: 2**-7, torch.float16: 2**-10, torch.float32: 1e-5}
# Phases against the op's few-rows kernel: fp32 sums in another order.
FP32_ORDER = 1e-5


def pack(q: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] in [-8, 7] -> uint8 [N, K/2]: k = 2j in the low nibble of byte j, 2j + 1 high."""
    lo, hi = q[:, 0::2].to(torch.int16) & 0xF, q[:, 1::2].to(torch.int16) & 0xF
    return (lo | (hi << 4)).to(U8)


def groups(k: int, gs: int) -> int:
    return -(-k // gs)


def case(n, k, gs, rng):
    """Random 4-bit values (both ends of the range met) and fp32 scales that differ per group."""
    q = torch.randint(-8, 8, (n, k), generator=rng, dtype=I8)
    q[0, 0], q[-1, -1] = -8, 7
    scale = torch.rand(n, groups(k, gs), generator=rng) * 0.01 + 1e-3
    return q, scale


def group_sums_reference(x, q, scale, gs, bias=None, activation="token", input_scale=None, smooth=None,
                         rotate=False):
    """float64 [M, N]: x [..., K] quantized to int8 as tcgemm.quantize does (its reference), then
    per group g of gs inputs the exact int64 sum of int8(x) * q over the group, times the row's
    activation scale (of the 128-wide block that holds the group, for activation="block") and
    weight_scale[n, g], summed over the groups, plus the bias."""
    k = x.shape[-1]
    x2d = x.detach().float().cpu().reshape(-1, k)
    m = x2d.shape[0]
    granularity = {"token": "token", "block": "group", "static": "tensor"}[activation]
    qx, sx = quantize_reference(x2d, granularity, scale=None if input_scale is None else input_scale.cpu(),
                                smooth=None if smooth is None else smooth.cpu(), rotate=rotate)
    sx = sx.double().reshape(m, -1) if activation != "static" else sx.double().reshape(1, 1).expand(m, 1)
    q64, s64 = q.cpu().long(), scale.cpu().double()
    out = torch.zeros(m, q.shape[0], dtype=torch.float64)
    for g in range(groups(k, gs)):
        lo, hi = g * gs, min(k, (g + 1) * gs)
        sums = qx[:, lo:hi].long() @ q64[:, lo:hi].t()
        sa = sx[:, lo // 128 if sx.shape[1] > 1 else 0]
        out += sums.double() * sa[:, None] * s64[:, g][None, :]
    if bias is not None:
        out += bias.detach().cpu().double()[None, :]
    return out


def assert_near(y, ref, tol):
    assert float(ref.abs().max()) > 0  # an unwritten output cannot pass
    assert torch.allclose(y.double().cpu(), ref, rtol=tol, atol=tol * float(ref.abs().max())), \
        float((y.double().cpu() - ref).abs().max())


# -- the op ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 16, 17, 33])
@pytest.mark.parametrize("n, k", [(24, 256), (40, 200), (72, 480)], ids=str)  # 200: no multiple of 32; 480 of 64
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_quant_linear_with_group_scales(gs, m, n, k, dtype, with_bias, device, rng):
    """quant_linear of a packed weight with fp32 scales per gs inputs: the float64 reference of
    each group's exact sum within the rounding of x's dtype; 2-D and 3-D x give the same bits."""
    q, scale = case(n, k, gs, rng)
    bias = torch.randn(n, generator=rng) if with_bias else None
    x = torch.randn(m, k, generator=rng).to(dtype)
    packed = pack(q).to(device)
    args = (scale.to(device), None if bias is None else bias.to(device))
    y = tcgemm.quant_linear(x.to(device), packed, *args)
    assert y.dtype == dtype and y.shape == (m, n)
    assert_near(y, group_sums_reference(x, q, scale, gs, bias), TOL[dtype])
    x3 = x.reshape(1, m, k).to(device)
    assert torch.equal(tcgemm.quant_linear(x3, packed, *args).reshape(m, n), y)


@pytest.mark.gpu
@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("m", [1, 3, 16, 17, 64])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1024, 14336), (200, 1024 + 96)], ids=str)
def test_quant_linear_with_group_scales_at_model_shapes(gs, m, n, k, rng):
    """Layer-sized weights on the GPU (the few-rows kernel at every row count): the float64
    reference within the rounding of bf16."""
    q, scale = case(n, k, gs, rng)
    x = torch.randn(m, k, generator=rng).to(torch.bfloat16)
    y = tcgemm.quant_linear(x.cuda(), pack(q).cuda(), scale.cuda())
    assert_near(y, group_sums_reference(x, q, scale, gs), TOL[torch.bfloat16])


ACTIVATIONS = {
    "token": dict(activation="token"),
    "block": dict(activation="block"),
    "static": dict(activation="static", input_scale=torch.tensor(0.02)),
    "smooth": dict(activation="token", smooth=torch.linspace(0.5, 2.0, 384)),
    "rotate": dict(activation="token", rotate=True),
}


@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("options", list(ACTIVATIONS))
def test_quant_linear_group_scales_with_every_activation(gs, options, device, rng):
    """Activations per token, per 1x128 block (a group lies in one block), static, smoothed or
    rotated: each group's exact sum with its row's (block's) activation scale."""
    n, k, m = 48, 384, 5
    q, scale = case(n, k, gs, rng)
    x = torch.randn(m, k, generator=rng)
    kw = {key: value.to(device) if isinstance(value, torch.Tensor) else value
          for key, value in ACTIVATIONS[options].items()}
    y = tcgemm.quant_linear(x.to(device), pack(q).to(device), scale.to(device), **kw)
    assert_near(y, group_sums_reference(x, q, scale, gs, **ACTIVATIONS[options]), TOL[torch.float32])


def test_the_reference_sums_each_group():
    """tcgemm.reference reads [N, ceil(K/64)] and [N, ceil(K/32)] tables as groups of 64 and 32
    (the width tells them apart), exactly: scaled_gemm_reference is the per-group sum in int64
    promoted in float64, int4_weight_reference q * scale[n, k // gs]."""
    rng = torch.Generator().manual_seed(5)
    for gs in SIZES:
        for k in (64, 200, 480):
            q, scale = case(16, k, gs, rng)
            x = torch.randn(3, k, generator=rng)
            qx, sx = quantize_reference(x, "token")
            got = scaled_gemm_reference(qx, q.t(), sx, scale, return_float64=True)
            assert torch.equal(got, group_sums_reference(x, q, scale, gs))
            step = scale.double().repeat_interleave(gs, dim=1)[:, :k]
            assert torch.equal(int4_weight_reference(pack(q), scale), q.double() * step)
    with pytest.raises(ValueError, match=r"weight_scale must be \[N, ceil\(K/gs\)\] for gs 128, 64 or 32"):
        int4_weight_reference(pack(q), torch.ones(16, 3))


def test_bad_group_tables_are_named(rng):
    """A packed weight's table fits one of the widths (the message names them all); fp32 scales
    per 64 or 32 inputs are for 4-bit weights without zero points (zero points are per 128)."""
    q, scale = case(8, 256, 32, rng)
    x = torch.randn(2, 256)
    with pytest.raises(ValueError, match=r"argument 'weight_scale' must have shape .*\[N, ceil\(K/128\)\] = \[8, 2\]"
                                         r", or, 4-bit per group of 64 or 32 inputs, \[N, ceil\(K/64\)\] = \[8, 4\] or "
                                         r"\[N, ceil\(K/32\)\] = \[8, 8\], got \[8, 5\]"):
        tcgemm.quant_linear(x, pack(q), torch.ones(8, 5))
    with pytest.raises(ValueError, match=r"argument 'weight_scale' must have shape \[N\] = \[8\] or \[N, 1\] "
                                         r"\(per-channel\), .*\[N, ceil\(K/128\)\] = \[8, 2\], got \[8, 8\]$"):
        tcgemm.quant_linear(x, q, scale)  # int8 weights: groups of 128 only
    with pytest.raises(ValueError, match=r"argument 'weight_zero_point' needs zero points and fp32 scales per 128 "
                                         r"inputs"):
        tcgemm.quant_linear(x, pack(q), scale, weight_zero_point=torch.zeros(8, 2, dtype=I8))
    with pytest.raises(ValueError, match=r"'weight_group_scale' \(two-level scales\) needs a per-channel"):
        tcgemm.quant_linear(x, pack(q), scale, weight_group_scale=torch.ones(8, 2, dtype=I8))


@pytest.mark.gpu
def test_other_gpu_backends_refuse_group_tables(rng):
    """On a GPU only the skinny kernel promotes per 64 or 32 inputs: another backend asked for is
    refused with a message that names it."""
    q, scale = case(8, 256, 32, rng)
    x = torch.randn(2, 256).cuda()
    others = [b for b in tcgemm.available_backends("cuda") if b in ("sm90", "sm80")]  # per-block promoting ones
    assert others
    for backend in others:
        with pytest.raises(ValueError, match=r"4-bit weights with scales per 32 or 64 inputs run on the skinny kernel "
                                             rf"only \(backend 'auto' or 'skinny'\), got backend '{backend}'"):
            tcgemm.quant_linear(x, pack(q).cuda(), scale.cuda(), backend=backend)

# -- by phases at many rows -------------------------------------------------------------------------


@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("options", list(ACTIVATIONS))
@pytest.mark.parametrize("k", [384, 200])  # 200: the last 128-block lacks some phases' groups
def test_phases_are_the_op(gs, options, k, device, rng):
    """grouped_linear_by_phases: S = 128 / gs GEMMs of the unpacked weight masked to the groups
    of one phase with scales per 128 inputs, summed in fp32: the float64 reference of each group's
    exact sum, and the op's result up to the order of the fp32 sums; every activation option."""
    kw = dict(ACTIVATIONS[options])
    if k % 128 and options in ("rotate", "smooth"):
        pytest.skip("rotation needs K a multiple of 128; the multipliers are [384]")
    n, m = 40, 20
    q, scale = case(n, k, gs, rng)
    bias = torch.randn(n, generator=rng)
    x = torch.randn(m, k, generator=rng).to(torch.bfloat16)
    dev = {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in kw.items()}
    packed, scale_d, bias_d = pack(q).to(device), scale.to(device), bias.to(device)
    activation = dev.pop("activation")
    y = grouped_linear_by_phases(x.to(device), packed, scale_d, gs, bias_d, activation, **dev)
    assert y.dtype == torch.bfloat16 and y.shape == (m, n)
    assert_near(y, group_sums_reference(x, q, scale, gs, bias, **kw), TOL[torch.bfloat16])
    xf = x.float().to(device)  # fp32 outputs: the order of the sums, not the bf16 rounding
    yf = grouped_linear_by_phases(xf, packed, scale_d, gs, bias_d, activation, **dev)
    op = tcgemm.quant_linear(xf, packed, scale_d, bias_d, activation, **dev)
    torch.testing.assert_close(yf, op, rtol=FP32_ORDER, atol=FP32_ORDER * float(op.abs().max()))


@pytest.mark.gpu
@pytest.mark.parametrize("preset", ["w4a8-group32", "w4a8-group64"])
@pytest.mark.parametrize("m", [1, 16, 17, 256, 300])
def test_layer_takes_the_phases_above_the_few_rows(preset, m, monkeypatch, rng):
    """On a GPU the layer computes by phases above GROUPED_KERNEL_ROWS rows, and with the op's
    few-rows kernel up to it: the op's result either way, up to the order of the fp32 sums."""
    import tcgemm.layer as layer_module

    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return grouped_linear_by_phases(*args, **kwargs)

    monkeypatch.setattr(layer_module, "grouped_linear_by_phases", counted)
    layer = tcgemm.QuantLinear.from_linear(torch.nn.Linear(1024, 512).cuda(), scheme=preset)
    x = torch.randn(m, 1024, generator=rng).cuda()
    with torch.no_grad():
        y = layer(x)
    assert len(calls) == (1 if m > GROUPED_KERNEL_ROWS else 0)
    op = tcgemm.quant_linear(x, layer.weight, layer.weight_scale, layer.bias)
    torch.testing.assert_close(y, op, rtol=FP32_ORDER, atol=FP32_ORDER * float(op.abs().max()))
    x16 = x.to(torch.bfloat16)
    assert_near(layer(x16), group_sums_reference(x16, layer.int_weight(), layer.weight_scale,
                                                 layer.scheme.weights.group_size, layer.bias), TOL[torch.bfloat16])


@pytest.mark.gpu
def test_phases_in_a_cuda_graph_and_compiled(rng):
    """The phases replay in a CUDA graph and compile (fullgraph) to the eager call's bits."""
    layer = tcgemm.QuantLinear.from_linear(torch.nn.Linear(1024, 256).cuda(), scheme="w4a8-group32")
    x = torch.randn(64, 1024, generator=rng).cuda()
    with torch.no_grad():
        want = layer(x)
        assert_replays_in_a_cuda_graph(lambda: layer(x), want)
        torch._dynamo.reset()
        assert torch.equal(torch.compile(layer, fullgraph=True)(x), want)


# -- weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gs", SIZES)
def test_quantize_weight_rule(gs, device):
    """grid="amax" per group of gs: scale = amax_g / 7 (1.0 for a zero group), q =
    clamp(round_half_even(w / scale), -8, 7); K not a multiple of gs (a short last group). The
    "mse" grid has no group with a larger squared error; GPTQ keeps round-to-nearest's scales."""
    n, k = 20, 200
    g = torch.Generator().manual_seed(gs)
    w = torch.randn(n, k, generator=g) * torch.linspace(0.01, 1.0, k)  # groups of different ranges
    w[3, gs:2 * gs] = 0
    packed, scale, none = tcgemm.weights.quantize_weight(w.to(device), "group", bits=4, grid="amax", group_size=gs)
    assert none is None and packed.shape == (n, k // 2) and scale.shape == (n, groups(k, gs))
    amax = torch.nn.functional.pad(w.abs(), (0, groups(k, gs) * gs - k)).view(n, -1, gs).amax(dim=2)
    rule = torch.where(amax > 0, amax / torch.tensor(7.0), 1.0)
    assert torch.equal(scale.cpu(), rule) and scale[3, 1] == 1
    step = rule.repeat_interleave(gs, dim=1)[:, :k]
    q_rule = torch.round(w / step).clamp(-8, 7).to(I8)
    assert torch.equal(tcgemm.unpack_int4(packed.cpu()), q_rule)
    err = (w.double() - int4_weight_reference(packed, scale)).abs()
    assert bool((err <= step.double() / 2 * (1 + 1e-6)).all())  # amax / 7: nothing is clamped

    def group_error(p, s):
        e = (w.double() - int4_weight_reference(p, s)).pow(2)
        return torch.nn.functional.pad(e, (0, groups(k, gs) * gs - k)).view(n, -1, gs).sum(dim=2)

    p_mse, s_mse, _ = tcgemm.weights.quantize_weight(w.to(device), "group", bits=4, group_size=gs)
    assert s_mse.shape == scale.shape
    assert bool((group_error(p_mse, s_mse) <= group_error(packed, scale) * (1 + 1e-5) + 1e-12).all())
    assert float(group_error(p_mse, s_mse).sum()) < 0.9 * float(group_error(packed, scale).sum())
    x = torch.randn(4 * k, k, generator=g)
    _, s_gptq, _ = tcgemm.weights.quantize_weight(w.to(device), "group", bits=4, group_size=gs,
                                                  gptq=tcgemm.GPTQ(), hessian=(x.t() @ x).to(device))
    assert torch.equal(s_gptq.cpu(), s_mse.cpu())


def test_quantize_weight_refuses_other_group_sizes():
    w = torch.randn(8, 256)
    for kw, match in [
        (dict(granularity="group", bits=4, group_size=16), "weight group_size must be one of 32, 64 or 128, got 16"),
        (dict(granularity="group", bits=4, group_size=256), "weight group_size must be one of 32, 64 or 128, got 256"),
        (dict(granularity="channel", bits=4, group_size=32), "weight group_size 32 needs symmetric 4-bit weights"),
        (dict(granularity="group", bits=4, group_size=64, symmetric=False),
         "asymmetric 4-bit 'group' weights have group_size 128"),
        (dict(granularity="group", bits=8, group_size=32), "8-bit 'group' weights have group_size 128"),
    ]:
        with pytest.raises(ValueError, match=f"tcgemm.weights.quantize_weight: .*{match}"):
            tcgemm.weights.quantize_weight(w, kw.pop("granularity"), **kw)
    assert tcgemm.nn.weight_scale_shape(4096, 14336, "group", group_size=32) == (4096, 448)
    with pytest.raises(ValueError, match="group_size must be one of 32, 64, 128 with granularity 'group'"):
        tcgemm.nn.weight_scale_shape(4096, 14336, "channel", group_size=32)


# -- the layer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["w4a8-group32", "w4a8-group64"])
def test_layer(preset, device, rng):
    """QuantLinear.from_linear with the preset: an fp32 scale per group [N, ceil(K/gs)], the
    dequantized weight q * scale (within half a step of the float one where the grid does not
    clip), the reference output, repr, a state dict that round-trips, tables of another group
    size refused on load and on assignment (the op would read their width as another size),
    torch.compile the same bits."""
    gs = tcgemm.PRESETS[preset].weights.group_size
    n, k = 72, 320  # K: no multiple of 128
    linear = torch.nn.Linear(k, n).to(device)
    layer = tcgemm.QuantLinear.from_linear(linear, scheme=preset)
    assert layer.scheme is tcgemm.PRESETS[preset] and layer.weight_group_scale is None
    assert layer.weight.shape == (n, k // 2) and layer.weight_scale.shape == (n, groups(k, gs))
    assert f"bits=4, group_size={gs}, activation='token'" in repr(layer)
    assert "group_size" not in repr(tcgemm.QuantLinear(k, n, scheme="w4a8-group"))
    deq = layer.dequantize_weight()
    exact = int4_weight_reference(layer.weight, layer.weight_scale)
    assert torch.equal(deq.cpu(), exact.float())
    step = layer.weight_scale.cpu().double().repeat_interleave(gs, dim=1)[:, :k]
    w = linear.weight.detach().cpu().double()
    bound = torch.maximum(step / 2, w.abs() - 7 * step)  # a value past 7.5 steps is clamped to the grid's end
    assert bool(((exact - w).abs() <= bound * (1 + 1e-6)).all())
    assert float((exact - w).abs().max()) < float(w.abs().max()) / 4
    x = torch.randn(2, 5, k, generator=rng).to(device)
    with torch.no_grad():
        y = layer(x)
    assert_near(y.reshape(10, n), group_sums_reference(x, layer.int_weight(), layer.weight_scale, gs, layer.bias),
                TOL[torch.float32])
    state = layer.state_dict()
    assert sorted(state) == ["bias", "weight", "weight_scale"]
    again = tcgemm.QuantLinear(k, n, scheme=preset, device=device)
    again.load_state_dict(state)
    with torch.no_grad():
        assert torch.equal(again(x), y)
    wrong = torch.ones(n, groups(k, 128), device=device)
    message = rf"'weight_scale' must have shape \[N, ceil\(K/{gs}\)\] = \[{n}, {groups(k, gs)}\] \(scales per " \
              rf"group of {gs} inputs\), got \[{n}, 3\]"
    with pytest.raises(ValueError, match="QuantLinear.load_state_dict: " + message):
        again.load_state_dict({**state, "weight_scale": wrong})
    with pytest.raises(ValueError, match="QuantLinear: argument " + message):
        again.weight_scale = wrong
    with pytest.raises(ValueError, match=r"'weight' must have shape \[N, K/2\]"):
        again.load_state_dict({**state, "weight": torch.zeros(n, k, dtype=U8, device=device)})
    whole = pickle.loads(pickle.dumps(layer))  # a layer pickled whole keeps its scheme and its checks
    with torch.no_grad():
        assert torch.equal(whole(x), y)
    with pytest.raises(ValueError, match="QuantLinear.load_state_dict: " + message):
        whole.load_state_dict({**state, "weight_scale": wrong})
    group128 = tcgemm.QuantLinear(k, n, scheme="w4a8-group", device=device)
    with pytest.raises(ValueError, match=rf"'weight_scale' must have shape \[N, ceil\(K/128\)\] = \[{n}, 3\]"):
        group128.load_state_dict(state)
    torch._dynamo.reset()
    with torch.no_grad():
        assert torch.equal(torch.compile(layer, fullgraph=True)(x), y)


@pytest.mark.parametrize("preset", ["w4a8-group32", "w4a8-group64"])
def test_layer_backward_and_quantize_model(preset):
    """Gradients flow to the input through the dequantized weight (groups of gs), and
    quantize_model swaps every Linear with the preset's buffers."""
    gs = tcgemm.PRESETS[preset].weights.group_size
    layer = tcgemm.QuantLinear.from_linear(torch.nn.Linear(256, 48), scheme=preset)
    x = torch.randn(3, 256, requires_grad=True)
    layer(x).sum().backward()
    assert torch.allclose(x.grad, layer.dequantize_weight().sum(dim=0).expand(3, -1), rtol=1e-5, atol=1e-6)
    model = torch.nn.Sequential(torch.nn.Linear(256, 384), torch.nn.ReLU(), torch.nn.Linear(384, 64))
    sample = torch.randn(4, 256)
    with torch.no_grad():
        want = model(sample)
    report = tcgemm.quantize_model(model, scheme=preset)
    assert report.swapped == ["0", "2"]
    assert model[0].weight_scale.shape == (384, 256 // gs) and model[2].weight_scale.shape == (64, 384 // gs)
    with torch.no_grad():
        got = model(sample)
    assert float((got - want).abs().max()) < 0.2 * float(want.abs().max())


# -- scales in bf16 or fp16 -------------------------------------------------------------------------

HALF = (torch.bfloat16, torch.float16)


@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("table_dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [1, 5, 17, 33])
@pytest.mark.parametrize("k", [384, 200])  # 200: no multiple of 32 or 128
@pytest.mark.parametrize("options", list(ACTIVATIONS))
def test_half_tables_are_their_fp32_values(gs, table_dtype, m, k, options, device, rng):
    """quant_linear reads a bf16 or fp16 table of scales per gs inputs in place, converted to fp32
    exactly: bit for bit the result of the fp32 table of the same values (2-D and 3-D x), within
    the rounding of bf16 of the float64 reference; every activation option."""
    if k % 128 and options in ("rotate", "smooth"):
        pytest.skip("rotation needs K a multiple of 128; the multipliers are [384]")
    n = 40
    q, scale = case(n, k, gs, rng)
    half = scale.to(table_dtype)
    bias = torch.randn(n, generator=rng)
    x = torch.randn(m, k, generator=rng).to(torch.bfloat16)
    kw = {key: value.to(device) if isinstance(value, torch.Tensor) else value
          for key, value in ACTIVATIONS[options].items()}
    packed, bias_d = pack(q).to(device), bias.to(device)
    y = tcgemm.quant_linear(x.to(device), packed, half.to(device), bias_d, **kw)
    assert y.dtype == torch.bfloat16 and y.shape == (m, n)
    assert torch.equal(y, tcgemm.quant_linear(x.to(device), packed, half.float().to(device), bias_d, **kw))
    assert torch.equal(tcgemm.quant_linear(x.reshape(1, m, k).to(device), packed, half.to(device), bias_d,
                                           **kw).reshape(m, n), y)
    assert_near(y, group_sums_reference(x, q, half, gs, bias, **ACTIVATIONS[options]), TOL[torch.bfloat16])


@pytest.mark.gpu
@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("table_dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [1, 16, 64])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1024, 14336), (200, 1024 + 96)], ids=str)
def test_half_tables_at_model_shapes(gs, table_dtype, m, n, k, rng):
    """Layer-sized weights on the GPU: a bf16 or fp16 table gives the fp32 table's bits."""
    q, scale = case(n, k, gs, rng)
    half = scale.to(table_dtype).cuda()
    x, packed = torch.randn(m, k, generator=rng).to(torch.bfloat16).cuda(), pack(q).cuda()
    y = tcgemm.quant_linear(x, packed, half)
    assert torch.equal(y, tcgemm.quant_linear(x, packed, half.float()))
    assert_near(y, group_sums_reference(x, q, half, gs), TOL[torch.bfloat16])


@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("table_dtype", HALF, ids=str)
def test_phases_read_half_tables(gs, table_dtype, device, rng):
    """grouped_linear_by_phases converts a bf16 or fp16 table to fp32 for its GEMMs (exactly): the
    bits of the fp32 table of the same values (which test_phases_are_the_op compares with the op)."""
    n, k, m = 40, 200, 20
    q, scale = case(n, k, gs, rng)
    half = scale.to(table_dtype).to(device)
    x, packed = torch.randn(m, k, generator=rng).to(device), pack(q).to(device)
    y = grouped_linear_by_phases(x, packed, half, gs)
    assert torch.equal(y, grouped_linear_by_phases(x, packed, half.float(), gs))
    assert_near(y, group_sums_reference(x, q, half, gs), TOL[torch.float32])


@pytest.mark.parametrize("gs", SIZES)
@pytest.mark.parametrize("table_dtype", HALF, ids=str)
def test_quantize_weight_rounds_the_scales_first(gs, table_dtype, device):
    """scale_dtype=bf16 / fp16: the scales of the fp32 rule (either grid) rounded to that dtype,
    and q = clamp(round_half_even(w / scale), -8, 7) against the rounded scales (not those of the
    fp32 rule, which differ), so that q * scale is what the layer computes with; GPTQ on the same
    rounded scales (with a diagonal Hessian: round to nearest on them)."""
    n, k = 64, 456  # K: no multiple of 32; enough values for the rounding of fp16 scales to move some q
    g = torch.Generator().manual_seed(gs)
    w = torch.randn(n, k, generator=g) * torch.linspace(0.01, 1.0, k)
    w[3, gs:2 * gs] = 0

    def spread(s):
        return s.cpu().float().repeat_interleave(gs, dim=1)[:, :k]

    for grid in ("amax", "mse"):
        _, s32, _ = tcgemm.weights.quantize_weight(w.to(device), "group", bits=4, grid=grid, group_size=gs)
        packed, s, none = tcgemm.weights.quantize_weight(w.to(device), "group", bits=4, grid=grid, group_size=gs,
                                                         scale_dtype=table_dtype)
        assert none is None and s.dtype == table_dtype and s.device == w.to(device).device
        assert torch.equal(s.cpu(), s32.cpu().to(table_dtype)) and s[3, 1] == 1
        q = torch.round(w / spread(s)).clamp(-8, 7).to(I8)
        assert torch.equal(tcgemm.unpack_int4(packed.cpu()), q)
        assert not torch.equal(q, torch.round(w / spread(s32)).clamp(-8, 7).to(I8))  # the order matters
        assert torch.equal(int4_weight_reference(packed, s), q.double() * spread(s).double())
        gptq = tcgemm.weights.quantize_weight(w.to(device), "group", bits=4, grid=grid, group_size=gs,
                                              scale_dtype=table_dtype, gptq=tcgemm.GPTQ(),
                                              hessian=torch.eye(k, device=device))
        assert torch.equal(gptq[0], packed) and torch.equal(gptq[1], s)


def test_quantize_weight_refuses_other_scale_dtypes():
    """scale_dtype other than fp32: bf16 or fp16, with 4-bit "group" weights in groups of 64 or 32 only."""
    w = torch.randn(8, 256)
    for granularity, bits, gs, dtype in [("group", 4, 128, torch.bfloat16), ("channel", 4, 128, torch.float16),
                                         ("channel", 8, 128, torch.bfloat16), ("group", 4, 32, torch.float64),
                                         ("group", 4, 64, torch.int32), ("group", 4, 32, "bfloat16")]:
        with pytest.raises(ValueError, match=r"tcgemm.weights.quantize_weight: argument 'scale_dtype' must be "
                                             r"torch.float32, or torch.bfloat16 or torch.float16 with 4-bit 'group' "
                                             rf"weights in groups of 64 or 32, got {dtype} with bits={bits}"):
            tcgemm.weights.quantize_weight(w, granularity, bits=bits, group_size=gs, scale_dtype=dtype)
    q, s, _ = tcgemm.weights.quantize_weight(w, "group", bits=4, group_size=32, scale_dtype=torch.float32)
    assert s.dtype == torch.float32 and torch.equal(s, tcgemm.weights.quantize_weight(w, "group", bits=4,
                                                                                     group_size=32)[1])


@pytest.mark.parametrize("preset", ["w4a8-group32", "w4a8-group64"])
@pytest.mark.parametrize("table_dtype", HALF, ids=str)
def test_layer_keeps_its_table_dtype(preset, table_dtype, device):
    """A layer's table per 64 or 32 inputs has the dtype it was built with (from_linear's
    scale_dtype), loaded (load_state_dict, assign or not, and a layer pickled whole) or assigned:
    fp32, bf16 or fp16, never converted, not by .to(dtype) / .half() / .float() either; other
    dtypes are refused naming the argument. dequantize_weight is q * scale exactly. Tables per 128
    inputs (and int8 layers) convert what they load to fp32, as before."""
    gs = tcgemm.PRESETS[preset].weights.group_size
    n, k = 72, 320
    linear = torch.nn.Linear(k, n).to(device)
    layer = tcgemm.QuantLinear.from_linear(linear, scheme=preset, scale_dtype=table_dtype)
    _, want, _ = tcgemm.weights.quantize_weight(linear.weight, "group", bits=4, group_size=gs,
                                                scale_dtype=table_dtype)
    assert layer.weight_scale.dtype == table_dtype and torch.equal(layer.weight_scale, want)
    assert torch.equal(layer.dequantize_weight().cpu(), int4_weight_reference(layer.weight, layer.weight_scale).float())
    assert f"bits=4, group_size={gs}, activation='token'" in repr(layer)
    for convert in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.float(), lambda m: m.double(),
                    lambda m: m.to(device)):
        assert convert(layer).weight_scale.dtype == table_dtype and torch.equal(layer.weight_scale, want)
    state = layer.state_dict()
    assert state["weight_scale"].dtype == table_dtype
    fresh = tcgemm.QuantLinear(k, n, scheme=preset, device=device)
    assert fresh.weight_scale.dtype == torch.float32
    fresh.load_state_dict(state)
    assert fresh.weight_scale.dtype == table_dtype and torch.equal(fresh.weight_scale, want)
    fp32_state = {**state, "weight_scale": want.float()}
    fresh.load_state_dict(fp32_state)  # the table takes the dtype loaded, whichever it is
    assert fresh.weight_scale.dtype == torch.float32 and torch.equal(fresh.weight_scale, want.float())
    fresh.load_state_dict(state, assign=True)
    assert fresh.weight_scale.dtype == table_dtype and torch.equal(fresh.weight_scale, want)
    fresh.weight_scale = want.to(torch.float16)
    assert fresh.weight_scale.dtype == torch.float16
    whole = pickle.loads(pickle.dumps(layer))
    assert whole.weight_scale.dtype == table_dtype and torch.equal(whole.weight_scale, want)
    dtypes = "torch.float32, torch.bfloat16 or torch.float16"
    for bad in (torch.int32, torch.float64, torch.int8):
        message = rf"'weight_scale' must have dtype {dtypes} \(scales per group of {gs} inputs, K = {k}\), got {bad}"
        with pytest.raises(TypeError, match="QuantLinear.load_state_dict: " + message):
            fresh.load_state_dict({**state, "weight_scale": want.to(bad)})
        with pytest.raises(TypeError, match="QuantLinear: argument " + message):
            fresh.weight_scale = want.to(bad)
    assert fresh.weight_scale.dtype == torch.float16  # unchanged by the refused ones
    one = tcgemm.QuantLinear(gs, 8, scheme=preset, device=device)  # K = gs: one group, read as scales per 128
    with pytest.raises(TypeError, match=rf"argument 'weight_scale' must have dtype torch.float32 \(scales per group "
                                        rf"of {gs} inputs, K = {gs}\), got {table_dtype}"):
        one.weight_scale = torch.ones(8, 1, dtype=table_dtype, device=device)
    for scheme in ("w4a8-group", "w8a8-group"):  # fp32 only: what they load is converted, as before
        other = tcgemm.QuantLinear(k, n, scheme=scheme, device=device)
        table = other.state_dict()
        other.load_state_dict({**table, "weight_scale": table["weight_scale"].to(table_dtype)})
        assert other.weight_scale.dtype == torch.float32


@pytest.mark.parametrize("preset", ["w4a8-group32", "w4a8-group64"])
@pytest.mark.parametrize("table_dtype", HALF, ids=str)
@pytest.mark.parametrize("m", [1, 5, 200])  # 200: by phases on a GPU
def test_layer_with_a_half_table_is_the_fp32_table(preset, table_dtype, m, device, rng):
    """A layer with a bf16 or fp16 table computes what the same layer with the fp32 table of the
    same values computes, bit for bit (eager, compiled); its gradient flows through q * scale."""
    n, k = 72, 320
    layer = tcgemm.QuantLinear.from_linear(torch.nn.Linear(k, n).to(device), scheme=preset, scale_dtype=table_dtype)
    twin = tcgemm.QuantLinear(k, n, scheme=preset, device=device)
    twin.load_state_dict({**layer.state_dict(), "weight_scale": layer.weight_scale.float()})
    assert twin.weight_scale.dtype == torch.float32
    x = torch.randn(m, k, generator=rng).to(device)
    with torch.no_grad():
        y = layer(x)
        assert torch.equal(y, twin(x))
        assert torch.equal(layer(x.to(torch.bfloat16)), twin(x.to(torch.bfloat16)))
        torch._dynamo.reset()
        assert torch.equal(torch.compile(layer, fullgraph=True)(x), y)
    xg = x.clone().requires_grad_(True)
    layer(xg).sum().backward()
    assert torch.equal(xg.grad, layer.dequantize_weight().sum(dim=0).expand(m, -1))


@pytest.mark.gpu
@pytest.mark.parametrize("table_dtype", HALF, ids=str)
def test_half_tables_in_a_cuda_graph(table_dtype, rng):
    """A layer with a bf16 or fp16 table replays in a CUDA graph to the eager call's bits, with
    the few-rows kernel and by phases."""
    layer = tcgemm.QuantLinear.from_linear(torch.nn.Linear(1024, 256).cuda(), scheme="w4a8-group32",
                                           scale_dtype=table_dtype)
    for m in (1, 200):
        x = torch.randn(m, 1024, generator=rng).cuda()
        with torch.no_grad():
            assert_replays_in_a_cuda_graph(lambda: layer(x), layer(x))


def test_tensor_parallel_shards_keep_whole_groups():
    """Row-wise shards (K on a multiple of 128: whole groups of 64 and 32 as well) keep their
    columns of the group table, and their outputs sum to the exact value of that sharded
    computation (each shard quantizes its own slice of x; the bias once); column-wise shards keep
    their rows, and their outputs are the layer's columns bit for bit."""
    from tcgemm.parallel import check_shardable, shard_quant_linear

    torch.manual_seed(0)
    linear = torch.nn.Linear(512, 256)
    x = torch.randn(3, 512)
    for preset in ("w4a8-group32", "w4a8-group64"):
        gs = tcgemm.PRESETS[preset].weights.group_size
        full = tcgemm.QuantLinear.from_linear(linear, scheme=preset)
        with torch.no_grad():
            y = full(x)
        parts, exact = [], 0
        for rank in range(2):
            shard = shard_quant_linear(tcgemm.QuantLinear.from_linear(linear, scheme=preset), "rowwise", rank, 2)
            cols, xs = 256 // gs, x[:, rank * 256:(rank + 1) * 256]
            assert torch.equal(shard.weight_scale, full.weight_scale[:, rank * cols:(rank + 1) * cols])
            assert torch.equal(shard.weight, full.weight[:, rank * 128:(rank + 1) * 128])
            exact = exact + group_sums_reference(xs, shard.int_weight(), shard.weight_scale, gs,
                                                 full.bias if rank == 0 else None)
            with torch.no_grad():
                parts.append(shard(xs))
            col = shard_quant_linear(tcgemm.QuantLinear.from_linear(linear, scheme=preset), "colwise", rank, 2)
            assert torch.equal(col.weight_scale, full.weight_scale[rank * 128:(rank + 1) * 128])
            with torch.no_grad():
                assert torch.equal(col(x), y[:, rank * 128:(rank + 1) * 128])
        assert_near(parts[0] + parts[1], exact, 2 * TOL[torch.float32])
        with pytest.raises(ValueError, match="shards of 192 would cut the blocks of 128 of .*4-bit weight's groups"):
            check_shardable(tcgemm.QuantLinear(384, 64, scheme=preset), "rowwise", 2)


def test_scheme_through_compressed_tensors_quantization_args():
    """A compressed-tensors QuantizationArgs of symmetric 4-bit weights in groups of 32 or 64
    maps to the presets, and the presets write their group size; other sizes, or asymmetric
    weights in groups of 32 or 64, are refused naming the group size."""
    ct = pytest.importorskip("compressed_tensors.quantization")
    for gs in SIZES:
        args = ct.QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=gs)
        assert tcgemm.WeightArgs.from_compressed_tensors(args) == tcgemm.WeightArgs("group", bits=4, group_size=gs)
        preset = tcgemm.PRESETS[f"w4a8-group{gs}"]
        written = {role: ct.QuantizationArgs(**kw) for role, kw in preset.to_compressed_tensors().items()}
        assert written["weights"].group_size == gs and written["weights"].num_bits == 4
        scheme = ct.QuantizationScheme(targets=["Linear"], **written)
        assert tcgemm.QuantScheme.from_compressed_tensors(scheme) == preset
        asym = ct.QuantizationArgs(num_bits=4, type="int", symmetric=False, strategy="group", group_size=gs)
        with pytest.raises(ValueError, match=rf"weights are asymmetric 4-bit int with strategy 'group' \(group_size "
                                             rf"{gs}\)"):
            tcgemm.WeightArgs.from_compressed_tensors(asym)
    for gs in (16, 256):
        args = ct.QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=gs)
        with pytest.raises(ValueError, match=rf"\(group_size {gs}\); 4-bit weights are read as groups of 32, 64 or "
                                             r"128 \(symmetric\)"):
            tcgemm.WeightArgs.from_compressed_tensors(args)


def test_presets_are_exported():
    assert tcgemm.W4A8_GROUP32 is tcgemm.PRESETS["w4a8-group32"]
    assert tcgemm.W4A8_GROUP64 is tcgemm.PRESETS["w4a8-group64"]
    assert {"W4A8_GROUP32", "W4A8_GROUP64"} <= set(tcgemm.__all__) and tcgemm.W4A8_GROUP32 != tcgemm.W4A8_GROUP
    assert dataclasses.replace(tcgemm.W4A8_GROUP32.weights, group_size=128) == tcgemm.W4A8_GROUP.weights

"""Tests for tcgemm.nn: QuantLinear and quantize_model (CPU always, CUDA when present).

Accuracy is stated against the float layer as SQNR = 10*log10(sum(ref^2) / sum((ref - out)^2)):
W8A8 with symmetric round-to-nearest on gaussian data loses ~1/(127*sqrt(12)) of each operand's
range per element, which puts a linear layer's output near 35-40 dB; the bounds below leave margin.
"""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm.nn import QuantizeReport, QuantLinear, quantize_model, quantize_weight, weight_scale_shape

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
COMBOS = [("channel", "token"), ("channel", "block"), ("group", "token"), ("group", "block"), ("block", "token"),
          ("block", "block")]
# Shapes chosen to hit edge blocks: K and N not multiples of 128, a single K block, and
# (N=2, K=200) where the block scale [1, 2] has the same shape as a per-channel [1, N] scale.
SHAPES = [(64, 96), (300, 130), (200, 2), (1000, 257)]  # (in_features, out_features)
SQNR_BOUND_DB = 30.0  # gaussian weights and inputs, every granularity combination


def sqnr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    ref, out = ref.double().cpu(), out.double().cpu()
    noise = (ref - out).pow(2).sum().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.pow(2).sum().item() / noise)


def gaussian_linear(in_features, out_features, bias=True, seed=0, device="cpu") -> nn.Linear:
    gen = torch.Generator().manual_seed(seed)
    lin = nn.Linear(in_features, out_features, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(out_features, in_features, generator=gen) / math.sqrt(in_features))
        if bias:
            lin.bias.copy_(torch.randn(out_features, generator=gen) * 0.1)
    return lin.to(device)


def randn(*shape, seed=1, dtype=torch.float32, device="cpu") -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)


def expand_blocks(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[R, C] per-128-block scales -> [rows, cols] per-element (edge blocks cut short)."""
    return scale.repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)[:, :cols]


def full_weight_scale(weight: str, scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A weight granularity's scales as one value per weight element [rows, cols]."""
    if weight == "channel":
        return scale[:, None].expand(rows, cols)
    if weight == "group":  # [rows, ceil(cols / 128)]: each row's 1x128 groups
        return scale.repeat_interleave(128, dim=1)[:, :cols]
    return expand_blocks(scale, rows, cols)


def dequantized_activation(x2d: torch.Tensor, granularity: str) -> torch.Tensor:
    """Independent pure-torch quantize -> dequantize of activations, the contract's rule, in float64."""
    xf = x2d.float()
    m, k = xf.shape
    if granularity == "token":
        amax = xf.abs().amax(dim=1, keepdim=True)
        scale = torch.where(amax == 0, 1.0, amax / 127)
        full = scale
    else:
        g = math.ceil(k / 128)
        amax = nn.functional.pad(xf.abs(), (0, g * 128 - k)).view(m, g, 128).amax(dim=2)
        scale = torch.where(amax == 0, 1.0, amax / 127)
        full = scale.repeat_interleave(128, dim=1)[:, :k]
    q = torch.round(xf / full).clamp(-127, 127)
    return q.double() * full.double()


# ---------------------------------------------------------------------------- weights, buffers


@pytest.mark.parametrize("in_features,out_features", SHAPES)
@pytest.mark.parametrize("weight", ["channel", "group", "block"])
def test_from_linear_buffers(weight, in_features, out_features):
    lin = gaussian_linear(in_features, out_features)
    q = QuantLinear.from_linear(lin, weight=weight, activation="token")
    assert q.in_features == in_features and q.out_features == out_features
    assert q.weight_granularity == weight and q.activation_granularity == "token"
    assert dict(q.named_parameters()) == {}
    assert set(dict(q.named_buffers())) == {"weight", "weight_scale", "bias"}
    assert q.weight.dtype == torch.int8 and tuple(q.weight.shape) == (out_features, in_features)
    expected_scale = {"channel": (out_features,), "group": (out_features, math.ceil(in_features / 128)),
                      "block": (math.ceil(out_features / 128), math.ceil(in_features / 128))}[weight]
    assert q.weight_scale.dtype == torch.float32 and tuple(q.weight_scale.shape) == expected_scale
    assert q.bias.dtype == torch.float32 and torch.equal(q.bias, lin.bias.detach())
    # Round to nearest: every weight is within half a step of its dequantized value, and each
    # group's largest magnitude lands on +-127.
    w = lin.weight.detach()
    full = full_weight_scale(weight, q.weight_scale, out_features, in_features)
    assert ((q.weight.float() * full - w).abs() <= full * (0.5 + 1e-5)).all()
    assert q.weight.abs().max().item() == 127
    if weight == "channel":
        assert torch.equal(q.weight.abs().amax(dim=1), torch.full((out_features,), 127, dtype=torch.int8))
    assert q.weight.min().item() >= -127


@pytest.mark.parametrize("weight", ["channel", "group", "block"])
def test_quantize_weight_zero_rows_and_no_bias(weight):
    lin = gaussian_linear(130, 140, bias=False)
    with torch.no_grad():
        lin.weight[:, :] = 0
        lin.weight[3, 5] = -2.0
    q, scale = quantize_weight(lin.weight, weight)
    assert q[3, 5].item() == -127 and q.count_nonzero().item() == 1
    assert scale.isfinite().all()
    assert (scale == 1.0).sum().item() == scale.numel() - 1  # all-zero groups get scale 1.0
    ql = QuantLinear.from_linear(lin, weight=weight)
    assert ql.bias is None and "bias" not in ql.state_dict()


def test_quantize_weight_from_bf16_on_any_device():
    lin = gaussian_linear(96, 64).to(torch.bfloat16)
    q, scale = quantize_weight(lin.weight, "channel")
    ref_q, ref_scale = quantize_weight(lin.weight.float(), "channel")
    assert torch.equal(q, ref_q) and torch.equal(scale, ref_scale)


def quantize_weight_definition(w: torch.Tensor, granularity: str) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_weight's rule in plain torch, on the CPU in fp32: scale = amax / 127 over each row
    (channel), 1x128 group of a row (group) or 128x128 block (1.0 where amax is 0),
    q = clamp(round_half_even(w / scale), -127, 127)."""
    w = w.detach().cpu().to(torch.float32)
    n, k = w.shape
    if granularity == "channel":
        amax = w.abs().amax(dim=1) if k > 0 else w.new_zeros(n)
    elif granularity == "group":
        kb = math.ceil(k / 128)
        amax = nn.functional.pad(w.abs(), (0, kb * 128 - k)).view(n, kb, 128).amax(dim=2)
    else:
        nb, kb = math.ceil(n / 128), math.ceil(k / 128)
        padded = nn.functional.pad(w.abs(), (0, kb * 128 - k, 0, nb * 128 - n))
        amax = padded.view(nb, 128, kb, 128).amax(dim=(1, 3))
    scale = torch.where(amax == 0, torch.ones_like(amax), amax / torch.full_like(amax, 127.0))
    full = full_weight_scale(granularity, scale, n, k)
    return torch.round(w / full).clamp(-127, 127).to(torch.int8), scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("n,k", [(1, 1), (64, 96), (130, 300), (257, 1000), (128, 129), (3, 0)], ids=str)
@pytest.mark.parametrize("granularity", ["channel", "group", "block"])
def test_quantize_weight_is_the_definition_bit_for_bit(granularity, n, k, dtype, device):
    """quantize_weight runs tcgemm.quantize on w's device; q and scale equal the plain definition."""
    if granularity != "channel" and k == 0:
        pytest.skip("no 1x128 groups or 128x128 blocks along an empty K")
    gen = torch.Generator().manual_seed(n * 1000 + k)
    w = torch.randn(n, k, generator=gen) * torch.logspace(-4, 4, n).reshape(n, 1)  # rows of every magnitude
    if n > 2 and k > 2:
        w[n // 2] = 0  # an all-zero row
        w[128:256, 128:256] = 0  # an all-zero 128x128 block (when there is a second row and column of blocks)
        w[1, 1] = 2.5 * 127  # amax 317.5, scale 2.5: q of w[1, 1] is 127 exactly
    w = w.to(dtype).to(device)
    q, scale = quantize_weight(w, granularity)
    q_def, scale_def = quantize_weight_definition(w, granularity)
    assert q.device == w.device and scale.device == w.device and q.is_contiguous() and scale.is_contiguous()
    assert scale.shape == weight_scale_shape(n, k, granularity) and scale.dtype == torch.float32
    assert k == 0 or q_def.ne(0).any(), "vacuous: the definition's q is all zeros"
    assert torch.equal(scale.cpu(), scale_def), "scale differs from the definition"
    assert torch.equal(q.cpu(), q_def), f"{int(q.cpu().ne(q_def).sum())} weights differ from the definition"


# ---------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lead", [(5,), (2, 3)], ids=["2d", "3d"])
@pytest.mark.parametrize("weight,activation", COMBOS)
def test_forward_dtype_and_shape(weight, activation, lead, dtype, device):
    q = QuantLinear.from_linear(gaussian_linear(300, 130, device=device), weight=weight, activation=activation)
    x = randn(*lead, 300, dtype=dtype, device=device)
    y = q(x)
    assert y.dtype == dtype and tuple(y.shape) == (*lead, 130) and y.device == x.device
    assert y.isfinite().all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("in_features,out_features", SHAPES)
@pytest.mark.parametrize("weight,activation", COMBOS)
def test_forward_matches_dequantized_reference(weight, activation, in_features, out_features, dtype, device):
    """QuantLinear is exactly dequant(x) @ dequant(W).T + b, up to fp32 accumulation and one rounding."""
    lin = gaussian_linear(in_features, out_features, device=device)
    q = QuantLinear.from_linear(lin, weight=weight, activation=activation)
    x = randn(3, 7, in_features, dtype=dtype, device=device)
    y = q(x)
    full = full_weight_scale(weight, q.weight_scale, out_features, in_features)
    w_deq = (q.weight.double() * full.double()).cpu()
    x_deq = dequantized_activation(x.reshape(-1, in_features).cpu(), activation)
    ref = (x_deq @ w_deq.t() + lin.bias.detach().double().cpu()).reshape(3, 7, out_features)
    rtol = {torch.bfloat16: 2**-8, torch.float16: 2**-10, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(y.double().cpu(), ref, rtol=rtol, atol=rtol * ref.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("weight,activation", COMBOS)
def test_sqnr_against_float_layer(weight, activation, dtype, device):
    lin = gaussian_linear(1024, 512, device=device)
    q = QuantLinear.from_linear(lin, weight=weight, activation=activation)
    x = randn(64, 1024, dtype=dtype, device=device)
    with torch.no_grad():
        ref = lin(x.float())
    got = sqnr_db(ref, q(x))
    assert got >= SQNR_BOUND_DB, f"SQNR {got:.1f} dB < {SQNR_BOUND_DB} dB ({weight}/{activation}, {dtype}, {device})"


def test_empty_batch(device):
    q = QuantLinear.from_linear(gaussian_linear(64, 32, device=device))
    assert tuple(q(torch.empty(0, 64, device=device)).shape) == (0, 32)
    assert tuple(q(torch.empty(2, 0, 64, device=device)).shape) == (2, 0, 32)


def test_one_dimensional_input(device):
    q = QuantLinear.from_linear(gaussian_linear(64, 32, device=device))
    x = randn(64, device=device)
    y = q(x)
    assert tuple(y.shape) == (32,) and torch.equal(y, q(x[None])[0])


def test_wrong_in_features_and_dtype_errors():
    q = QuantLinear.from_linear(gaussian_linear(64, 32))
    with pytest.raises(ValueError, match=r"in_features=64.*\[4, 63\]"):
        q(torch.randn(4, 63))
    with pytest.raises(ValueError, match="in_features=64"):
        q(torch.tensor(1.0))
    with pytest.raises(TypeError, match="float64"):
        q(torch.randn(4, 64, dtype=torch.float64))


def test_bad_arguments():
    with pytest.raises(ValueError, match="weight granularity.*'channel', 'group', 'block'.*'tensor'"):
        QuantLinear(64, 32, weight="tensor")
    with pytest.raises(ValueError, match="activation granularity.*'group'"):
        QuantLinear.from_linear(gaussian_linear(64, 32), activation="group")
    with pytest.raises(TypeError, match="nn.Linear"):
        QuantLinear.from_linear(nn.Conv1d(4, 4, 1))
    with pytest.raises(ValueError, match="weight granularity"):
        quantize_weight(torch.randn(4, 4), "row")


def test_half_and_to_dtype_keep_fp32_scales():
    """model.half() / model.to(bf16) after quantizing must not round the scales or bias."""
    q = QuantLinear.from_linear(gaussian_linear(200, 96), weight="block")
    scale, bias = q.weight_scale.clone(), q.bias.clone()
    x = randn(4, 200)
    y = q(x)
    for convert in (lambda m: m.half(), lambda m: m.to(torch.bfloat16), lambda m: m.float()):
        convert(q)
        assert q.weight.dtype == torch.int8
        assert torch.equal(q.weight_scale, scale) and q.weight_scale.dtype == torch.float32
        assert torch.equal(q.bias, bias) and q.bias.dtype == torch.float32
    assert torch.equal(q(x), y)


def test_repr():
    text = repr(QuantLinear.from_linear(gaussian_linear(64, 32, bias=False), weight="block", activation="block"))
    assert text.startswith("QuantLinear(")
    for part in ("in_features=64", "out_features=32", "bias=False", "weight='block'", "activation='block'"):
        assert part in text, text


# ---------------------------------------------------------------------------- serialization


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("weight,activation", COMBOS)
def test_state_dict_round_trip_torch_save(weight, activation, bias):
    q = QuantLinear.from_linear(gaussian_linear(300, 130, bias=bias), weight=weight, activation=activation)
    state = q.state_dict()
    assert all(type(v) is torch.Tensor for v in state.values())  # plain tensors only
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = QuantLinear(300, 130, bias=bias, weight=weight, activation=activation)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    x = randn(6, 300)
    assert torch.equal(fresh(x), q(x))


@pytest.mark.parametrize("weight,activation", COMBOS)
def test_state_dict_round_trip_safetensors(weight, activation):
    st = pytest.importorskip("safetensors.torch")
    q = QuantLinear.from_linear(gaussian_linear(300, 130), weight=weight, activation=activation)
    fresh = QuantLinear(300, 130, weight=weight, activation=activation)
    fresh.load_state_dict(st.load(st.save(q.state_dict())))
    x = randn(6, 300)
    assert torch.equal(fresh(x), q(x))


def test_load_state_dict_with_other_granularity_fails():
    q = QuantLinear.from_linear(gaussian_linear(300, 130), weight="block")
    with pytest.raises(RuntimeError, match="weight_scale"):
        QuantLinear(300, 130, weight="channel").load_state_dict(q.state_dict())


# ---------------------------------------------------------------------------- quantize_model


class Block(nn.Module):
    def __init__(self, dim=64, hidden=96):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class TinyNet(nn.Module):
    def __init__(self, dim=64, vocab=10):
        super().__init__()
        self.layers = nn.ModuleList([Block(dim), Block(dim)])
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


ALL_NET_LINEARS = [f"layers.{i}.{p}" for i in range(2) for p in ("gate", "up", "down")] + ["lm_head"]


def tiny_net(seed=0) -> TinyNet:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return TinyNet()


def test_quantize_model_swaps_all_and_reports():
    model = tiny_net()
    ref_model = copy.deepcopy(model)
    report = quantize_model(model)
    assert isinstance(report, QuantizeReport)
    assert report.swapped == ALL_NET_LINEARS and report.skipped == []
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert isinstance(model.layers[1].down, QuantLinear) and isinstance(model.lm_head, QuantLinear)
    text = str(report)
    assert "7 nn.Linear swapped" in text and "0 skipped" in text and "layers.1.up" in text
    x = randn(4, 9, 64)
    with torch.no_grad():
        got = sqnr_db(ref_model(x), model(x))
    assert got >= 25.0, f"SQNR of the whole quantized TinyNet {got:.1f} dB < 25 dB"


def test_quantize_model_skip_by_name_and_pattern():
    model = tiny_net()
    report = quantize_model(model, skip=("lm_head", "*.gate"), weight="block", activation="block")
    assert report.swapped == ["layers.0.up", "layers.0.down", "layers.1.up", "layers.1.down"]
    assert [name for name, _ in report.skipped] == ["layers.0.gate", "layers.1.gate", "lm_head"]
    assert "'*.gate'" in dict(report.skipped)["layers.0.gate"]
    assert "'lm_head'" in dict(report.skipped)["lm_head"]
    assert type(model.lm_head) is nn.Linear and type(model.layers[0].gate) is nn.Linear
    assert model.layers[0].up.weight_granularity == "block" and model.layers[0].up.activation_granularity == "block"
    text = str(report)
    assert "4 nn.Linear swapped" in text and "3 skipped" in text and "lm_head" in text
    model(randn(2, 64))  # still runs, mixed float / int8


def test_quantize_model_skip_single_string_and_callable():
    model = tiny_net()
    report = quantize_model(model, skip="layers.0.*")
    assert [n for n, _ in report.skipped] == ["layers.0.gate", "layers.0.up", "layers.0.down"]
    model = tiny_net()
    seen = []

    def skip(name, module):
        seen.append(name)
        return module.out_features == 10

    report = quantize_model(model, skip=skip)
    assert seen == ALL_NET_LINEARS
    assert report.skipped == [("lm_head", "skip callable returned True")]
    assert len(report.swapped) == 6


def test_quantize_model_sequential_min_features_and_shared():
    shared = nn.Linear(32, 32)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), shared, nn.ReLU(), shared, nn.Linear(32, 4))
    report = quantize_model(model, min_features=8)
    assert report.swapped == ["0", "2"]
    assert report.skipped == [("5", "in/out features 32/4 < min_features=8")]
    assert model[2] is model[4] and isinstance(model[4], QuantLinear)  # still one shared layer
    assert model(randn(3, 16)).shape == (3, 4)


def test_quantize_model_leaves_multihead_attention_and_rejects_bare_linear():
    model = nn.Sequential(nn.MultiheadAttention(32, 4, batch_first=True))
    report = quantize_model(model)
    assert report.swapped == [] and report.skipped[0][0] == "0.out_proj"
    assert "MultiheadAttention" in report.skipped[0][1]
    with pytest.raises(TypeError, match="from_linear"):
        quantize_model(nn.Linear(4, 4))


def test_quantized_model_state_dict_loads_into_fresh_quantized_model():
    """The deployment path: build the float model, quantize_model it, then load int8 weights."""
    model = tiny_net(seed=0)
    quantize_model(model, skip=("lm_head",), weight="block", activation="block")
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    fresh = tiny_net(seed=1)  # different float weights, overwritten by the load
    quantize_model(fresh, skip=("lm_head",), weight="block", activation="block")
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    x = randn(2, 5, 64)
    assert torch.equal(fresh(x), model(x))


# ---------------------------------------------------------------------------- a trained model

DIGITS_MAX_DROP_PP = 0.5  # accuracy drop allowed after quantization, in percentage points
DIGITS_LAYER_SQNR_DB = 35.0  # per-layer bound on real activations (measured 44-53 dB; post-ReLU inputs are one-signed)


@pytest.fixture(scope="module")
def digits_mlp():
    """A 64-256-256-10 ReLU MLP trained on sklearn's digits (8x8 images), fp32 on the CPU.

    Returns (model, x_test, y_test). The 797-image test split makes 0.5 pp four images.
    """
    pytest.importorskip("sklearn.datasets")
    from examples.demo import train_digits_mlp  # the demo's model, so both report the same thing

    return train_digits_mlp(seed=0)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return 100.0 * (model(x).argmax(dim=1).cpu() == y).double().mean().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("weight,activation", [("channel", "token"), ("block", "block")])
def test_trained_digits_mlp(digits_mlp, weight, activation, device, dtype):
    float_model, x_test, y_test = digits_mlp
    float_acc = accuracy(float_model, x_test, y_test)  # the fp32 model as trained: the baseline
    assert float_acc >= 90.0, f"the float MLP did not train: {float_acc:.2f}%"
    float_model = copy.deepcopy(float_model).to(device)
    model = copy.deepcopy(float_model)
    report = quantize_model(model, weight=weight, activation=activation)
    assert report.swapped == ["0", "2", "4"]

    captured = {}
    hooks = [
        module.register_forward_hook(lambda m, inp, out, name=name: captured.__setitem__(name, (inp[0], out)))
        for name, module in model.named_modules()
        if isinstance(module, QuantLinear)
    ]
    x = x_test.to(device=device, dtype=dtype)
    quant_acc = accuracy(model, x, y_test)
    for hook in hooks:
        hook.remove()

    float_layers = dict(float_model.named_modules())
    layer_sqnr = {}
    with torch.no_grad():
        for name, (inp, out) in captured.items():
            layer_sqnr[name] = sqnr_db(float_layers[name](inp.float()), out)
    summary = (
        f"{weight}/{activation} {device} {dtype}: float {float_acc:.2f}% -> int8 {quant_acc:.2f}%, "
        f"per-layer SQNR " + ", ".join(f"{n}: {v:.1f} dB" for n, v in layer_sqnr.items())
    )
    print(summary)
    assert float_acc - quant_acc <= DIGITS_MAX_DROP_PP, summary
    assert min(layer_sqnr.values()) >= DIGITS_LAYER_SQNR_DB, summary


# ---------------------------------------------------------------------------- torch.compile, CUDA graphs


def quant_mlp(device, weight, activation, dims=(256, 512, 128)) -> nn.Sequential:
    # ReLU only between the layers: exact in every implementation, so compiled == eager bit for bit.
    lins = [gaussian_linear(a, b, seed=i, device=device) for i, (a, b) in enumerate(zip(dims, dims[1:]))]
    layers = []
    for lin in lins:
        layers += [QuantLinear.from_linear(lin, weight=weight, activation=activation), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


@pytest.mark.parametrize("weight,activation", COMBOS)
def test_compile_fullgraph_traces_cpu(weight, activation):
    """No graph break and no data-dependent Python: Dynamo + AOTAutograd over the fake kernels."""
    model = quant_mlp("cpu", weight, activation)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for m in (8, 3):
        x = randn(2, m, 256, seed=m)
        assert torch.equal(compiled(x), model(x))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("weight,activation", COMBOS)
def test_compile_fullgraph_matches_eager_cuda(weight, activation, dtype):
    torch._dynamo.reset()
    model = quant_mlp("cuda", weight, activation)
    compiled = torch.compile(model, fullgraph=True)
    for m in (64, 17, 1):
        x = randn(m, 256, seed=m, dtype=dtype, device="cuda")
        with torch.no_grad():
            assert torch.equal(compiled(x), model(x)), f"M={m}"


@pytest.mark.gpu
@pytest.mark.parametrize("weight,activation", COMBOS)
def test_cuda_graph_capture_and_replay(weight, activation):
    model = quant_mlp("cuda", weight, activation)
    static_x = randn(32, 256, dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():  # warm up outside the capture
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_out = model(static_x)
    for seed in (10, 11, 12):
        x = randn(32, 256, seed=seed, dtype=torch.bfloat16, device="cuda")
        static_x.copy_(x)
        graph.replay()
        with torch.no_grad():
            expected = model(x)
        torch.cuda.synchronize()
        assert torch.equal(static_out, expected), f"replay with inputs seed={seed}"

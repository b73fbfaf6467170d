"""QuantScheme: the one description of a layer's quantization, its shorthands, presets,
compressed-tensors conversion, and the capability queries (CPU; the layer cases run on CUDA too)."""

import dataclasses
import re

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm import ActivationArgs, QuantScheme, WeightArgs
from tcgemm._scales import decode_weight_scale, scale_varies_along_k

KEYWORDS = [
    dict(weight=w, activation=a, asymmetric=asym)
    for w in ("channel", "group", "block")
    for a in ("token", "block", "static")
    for asym in (False, True)
    if not asym or (w == "channel" and a != "block")
]


@pytest.mark.parametrize("kw", KEYWORDS, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_keywords_are_shorthands_for_a_scheme(kw):
    scheme = QuantScheme.from_keywords(**kw)
    assert (scheme.weight, scheme.activation, scheme.asymmetric) == (kw["weight"], kw["activation"], kw["asymmetric"])
    a = tcgemm.QuantLinear(256, 384, **kw)
    b = tcgemm.QuantLinear(256, 384, scheme=scheme)
    assert a.scheme == b.scheme == scheme
    assert (b.weight_granularity, b.activation_granularity, b.asymmetric) == (kw["weight"], kw["activation"],
                                                                               kw["asymmetric"])
    assert {k: None if v is None else (v.shape, v.dtype) for k, v in a._buffers.items()} == {
        k: None if v is None else (v.shape, v.dtype) for k, v in b._buffers.items()}
    assert tuple(b.weight_scale.shape) == scheme.weights.scale_shape(384, 256)


def test_presets_name_the_common_recipes():
    assert tcgemm.W8A8_DYNAMIC == QuantScheme.from_keywords()
    assert tcgemm.W8A8_STATIC == QuantScheme.from_keywords(activation="static")
    assert tcgemm.W8A8_BLOCK == QuantScheme.from_keywords(weight="block", activation="block")
    assert tcgemm.W8A8_GROUP == QuantScheme.from_keywords(weight="group", activation="block")
    assert tcgemm.W8A8_CHANNEL_GROUP == QuantScheme.from_keywords(activation="block")
    assert tcgemm.W8A8_ASYMMETRIC == QuantScheme.from_keywords(asymmetric=True)
    assert tcgemm.W8A8_STATIC_ASYMMETRIC == QuantScheme.from_keywords(activation="static", asymmetric=True)
    assert tcgemm.W4A8 == QuantScheme(WeightArgs("channel", bits=4)) and tcgemm.W4A8.weights.two_level
    assert tcgemm.W4A8_GROUP == QuantScheme(WeightArgs("group", bits=4)) and not tcgemm.W4A8_GROUP.weights.two_level
    assert tcgemm.PRESETS["w4a8"] is tcgemm.W4A8 and tcgemm.PRESETS["w4a8-group"] is tcgemm.W4A8_GROUP
    assert tcgemm.W4A8_GROUP_ASYMMETRIC == QuantScheme(WeightArgs("group", bits=4, symmetric=False))
    assert tcgemm.PRESETS["w4a8-group-asymmetric"] is tcgemm.W4A8_GROUP_ASYMMETRIC
    for size in (32, 64):
        preset = getattr(tcgemm, f"W4A8_GROUP{size}")
        assert preset == QuantScheme(WeightArgs("group", bits=4, group_size=size)) and preset.per_block
        assert tcgemm.PRESETS[f"w4a8-group{size}"] is preset and preset != tcgemm.W4A8_GROUP
    assert set(tcgemm.PRESETS.values()) == {tcgemm.W8A8_DYNAMIC, tcgemm.W8A8_STATIC, tcgemm.W8A8_BLOCK,
                                            tcgemm.W8A8_GROUP, tcgemm.W8A8_CHANNEL_GROUP, tcgemm.W8A8_ASYMMETRIC,
                                            tcgemm.W8A8_STATIC_ASYMMETRIC, tcgemm.W4A8, tcgemm.W4A8_GROUP,
                                            tcgemm.W4A8_GROUP_ASYMMETRIC, tcgemm.W4A8_GROUP32, tcgemm.W4A8_GROUP64}
    for preset in tcgemm.PRESETS.values():
        assert preset.check_layer() is preset
    with pytest.raises(dataclasses.FrozenInstanceError):
        tcgemm.W8A8_DYNAMIC.smooth = 0.5  # type: ignore[misc]


def test_per_block_follows_the_scales():
    assert not tcgemm.W8A8_DYNAMIC.per_block and not tcgemm.W8A8_STATIC.per_block
    assert not tcgemm.W4A8.per_block and tcgemm.W4A8_GROUP.per_block  # two-level: int32 sums over all of K
    assert tcgemm.W8A8_BLOCK.per_block and tcgemm.W8A8_GROUP.per_block
    assert QuantScheme(activations=ActivationArgs("group")).per_block
    assert tcgemm.W8A8_STATIC.needs_calibration and not tcgemm.W8A8_DYNAMIC.needs_calibration
    assert dataclasses.replace(tcgemm.W8A8_DYNAMIC, smooth=0.5).needs_calibration


@pytest.mark.parametrize("granularity,layout", [("channel", "per-row"), ("group", "per-row-block"),
                                                ("block", "per-block-128x128")])
def test_weight_scale_shapes_decode_as_their_layout(granularity, layout):
    for n, k in [(384, 256), (130, 129), (2, 1), (257, 1000)]:  # N = 1: one block is one channel
        shape = WeightArgs(granularity).scale_shape(n, k)
        assert decode_weight_scale(shape, n, k) == layout
        assert tcgemm.nn.weight_scale_shape(n, k, granularity) == shape


def test_bad_schemes_are_named():
    with pytest.raises(ValueError, match="tcgemm.nn: weight granularity must be one of 'channel', 'group', 'block'"):
        QuantScheme.from_keywords(weight="row")
    with pytest.raises(ValueError, match="activation granularity must be one of 'token', 'block', 'static'"):
        QuantScheme.from_keywords(activation="group")
    with pytest.raises(ValueError, match="asymmetric activations need weight='channel'"):
        QuantScheme.from_keywords(weight="block", asymmetric=True)
    with pytest.raises(ValueError, match=r"weights are 2-bit; tcgemm quantizes weights to \(4, 8\) bits"):
        WeightArgs(bits=2)
    for granularity in ("block", "tensor"):
        with pytest.raises(ValueError, match=f"4-bit weights need granularity 'channel' \\(two-level scales\\) or "
                                             f"'group' \\(float group scales\\), got '{granularity}'"):
            WeightArgs(granularity, bits=4)
    with pytest.raises(ValueError, match="asymmetric activations need weight='channel'"):
        QuantScheme(WeightArgs("group", bits=4), ActivationArgs("token", symmetric=False)).check_layer()
    with pytest.raises(ValueError, match="asymmetric activations need weight='channel'"):
        QuantScheme(WeightArgs("channel", bits=4), ActivationArgs("group", symmetric=False)).check_layer()
    two_level_asymmetric = QuantScheme(WeightArgs("channel", bits=4), ActivationArgs("token", symmetric=False))
    assert two_level_asymmetric.check_layer() is two_level_asymmetric  # a per-channel float scale: as W8A8
    with pytest.raises(ValueError, match="weights are asymmetric 8-bit per channel; weight zero points are read with "
                                         "4-bit weights per group of 128"):
        WeightArgs(symmetric=False)
    with pytest.raises(ValueError, match="weights are asymmetric 4-bit per channel"):
        WeightArgs("channel", bits=4, symmetric=False)
    with pytest.raises(ValueError, match=r"input activation strategy 'token' \(dynamic=False\) is not dynamic token"):
        QuantScheme(activations=ActivationArgs("token", dynamic=False)).activation
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]"):
        QuantScheme(smooth=1.5)
    with pytest.raises(ValueError, match="QuantLinear: pass scheme= or its shorthands"):
        tcgemm.QuantLinear(4, 4, weight="block", scheme=tcgemm.W8A8_DYNAMIC)
    with pytest.raises(ValueError, match="quantize_model: scheme must be a QuantScheme or one of 'w8a8'"):
        tcgemm.quantize_model(nn.Sequential(nn.Linear(4, 4)), scheme="w4a16")
    with pytest.raises(TypeError, match="scheme must be a QuantScheme or a preset name, got dict"):
        tcgemm.QuantLinear(4, 4, scheme={})


@pytest.mark.parametrize("name", sorted(n for n, s in tcgemm.PRESETS.items() if s.bits == 8))
def test_a_scheme_builds_the_same_layer_as_its_keywords(name, device):  # device: conftest's, CPU and CUDA
    scheme = tcgemm.PRESETS[name]
    torch.manual_seed(0)
    linear = nn.Linear(300, 260).to(device)
    x = torch.randn(5, 300, device=device)
    amax = x.abs().amax(0)
    lo, hi = x.amin(0), x.amax(0)
    keywords = dict(weight=scheme.weight, activation=scheme.activation, asymmetric=scheme.asymmetric)
    extra = dict(input_amax=amax, input_range=(lo, hi)) if scheme.static else {}
    a = tcgemm.QuantLinear.from_linear(linear, **keywords, **extra)
    b = tcgemm.QuantLinear.from_linear(linear, scheme=name, **extra)
    assert b.scheme == scheme
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    with torch.no_grad():
        ya, yb = a(x), b(x)
    assert ya.abs().sum() > 0 and torch.equal(ya, yb)


def test_quantize_model_takes_a_scheme():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 384), nn.ReLU(), nn.Linear(384, 256))
    x = torch.randn(3, 256)
    with tcgemm.calibrate(model) as amax, torch.no_grad():
        model(x)
    scheme = dataclasses.replace(tcgemm.W8A8_STATIC, smooth=0.5)
    twin = nn.Sequential(nn.Linear(256, 384), nn.ReLU(), nn.Linear(384, 256))
    twin.load_state_dict(model.state_dict())
    report = tcgemm.quantize_model(model, scheme=scheme, calibration=amax)
    tcgemm.quantize_model(twin, activation="static", smooth=0.5, calibration=amax)
    assert report.swapped == ["0", "2"]
    assert model[0].scheme == scheme and model[0].smooth is not None
    with torch.no_grad():
        assert torch.equal(model(x), twin(x))
    assert "swapped  '0'" in str(report)


@pytest.mark.parametrize("name", sorted(tcgemm.PRESETS))
def test_compressed_tensors_round_trip(name):
    ct = pytest.importorskip("compressed_tensors.quantization")
    scheme = tcgemm.PRESETS[name]
    args = scheme.to_compressed_tensors()
    ct_scheme = ct.QuantizationScheme(targets=["Linear"], **{k: ct.QuantizationArgs(**v) for k, v in args.items()})
    # Two-level 4-bit weights are saved with float group scales (the format has no integer ones).
    saved = dataclasses.replace(scheme, weights=WeightArgs("group", bits=4)) if scheme.weights.two_level else scheme
    assert QuantScheme.from_compressed_tensors(ct_scheme) == saved
    assert QuantScheme.from_compressed_tensors(ct_scheme.model_dump(mode="json")) == saved
    weights = ct_scheme.weights
    strategy = getattr(weights.strategy, "value", weights.strategy)
    assert (weights.num_bits, weights.symmetric, strategy) == (scheme.bits, scheme.weights.symmetric, saved.weight)
    if scheme.bits == 4:
        assert weights.group_size == scheme.weights.group_size in (32, 64, 128)
    assert ct_scheme.input_activations.dynamic is (not scheme.static)


@pytest.mark.parametrize("weights,match", [
    (dict(num_bits=4, strategy="channel"), "weights are 4-bit int with strategy 'channel'"),
    (dict(num_bits=4, strategy="group", group_size=16),
     r"weights are 4-bit int with strategy 'group' \(group_size 16\); 4-bit weights are read as groups of 32, 64 "
     r"or 128 \(symmetric\) or 128 \(asymmetric\)"),
    (dict(num_bits=4, strategy="group", group_size=256), r"4-bit int with strategy 'group' \(group_size 256\)"),
    (dict(num_bits=4, strategy="group", group_size=32, symmetric=False),
     r"weights are asymmetric 4-bit int with strategy 'group' \(group_size 32\)"),
    (dict(num_bits=8, strategy="group", group_size=32), r"weight strategy 'group' \(group_size 32, block_structure "
     r"None\) is not channel, tensor, group of 128"),
    (dict(num_bits=4, strategy="block", block_structure=[128, 128]), "weights are 4-bit int with strategy 'block'"),
    (dict(num_bits=2, strategy="channel"), "weights are 2-bit int, not 4/8-bit int"),
])
def test_4bit_checkpoint_weights_are_groups_of_128_64_or_32(weights, match):
    args = dict(type="int", symmetric=True) | weights
    with pytest.raises(ValueError, match=match):
        WeightArgs.from_compressed_tensors(args)
    for size in (128, 64, 32):
        got = WeightArgs.from_compressed_tensors(dict(num_bits=4, type="int", symmetric=True, strategy="group",
                                                      group_size=size))
        assert got == WeightArgs("group", bits=4, group_size=size) and got.scale_shape(8, 200) == (8, -(-200 // size))


def test_group_sizes_other_than_128_are_symmetric_4bit_groups_only():
    """group_size 64 or 32 is a field of symmetric 4-bit "group" weights; anything else (another
    size, another format) is refused with a message naming the field and the allowed values; a
    scheme of groups of 128 keeps its repr and equality."""
    assert WeightArgs("group", bits=4, group_size=128) == WeightArgs("group", bits=4)
    assert repr(WeightArgs("group", bits=4)) == "WeightArgs(granularity='group', bits=4, symmetric=True)"
    assert repr(WeightArgs("group", bits=4, group_size=32)) == ("WeightArgs(granularity='group', bits=4, "
                                                                "symmetric=True, group_size=32)")
    assert str(tcgemm.W4A8_GROUP64) == "weight=group, bits=4, group_size=64, activation=token"
    assert str(tcgemm.W4A8_GROUP) == "weight=group, bits=4, activation=token"
    for size in (16, 96, 256, 0, True):
        with pytest.raises(ValueError, match=rf"weight group_size must be one of 32, 64 or 128, got {size!r}"):
            WeightArgs("group", bits=4, group_size=size)
    for kw in [dict(granularity="group", bits=4, symmetric=False), dict(granularity="channel", bits=4),
               dict(granularity="group", bits=8), dict(granularity="channel", bits=8)]:
        with pytest.raises(ValueError, match=r"weight group_size 32 needs symmetric 4-bit weights with granularity "
                                             r"'group' \(fp32 group scales\); .* weights have group_size 128"):
            WeightArgs(group_size=32, **kw)


def test_per_tensor_weights_of_checkpoints_run_per_channel():
    scheme = QuantScheme.from_compressed_tensors(
        {"weights": dict(num_bits=8, type="int", symmetric=True, strategy="tensor"),
         "input_activations": dict(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True)})
    assert scheme.weight == "tensor" and scheme.layer_scheme() == tcgemm.W8A8_DYNAMIC
    with pytest.raises(ValueError, match="SmoothQuant multipliers have no place"):
        dataclasses.replace(scheme, smooth=0.5).to_compressed_tensors()


def test_capabilities_come_from_dispatch():
    assert tcgemm.backends_for("gemm", device="cpu") == ["cpu"]
    assert tcgemm.backends_for("quant_linear", tcgemm.W8A8_BLOCK, device="cpu") == ["cpu"]
    for backend in tcgemm.BACKENDS:
        assert tcgemm.supports(backend, "gemm") and tcgemm.supports(backend, "int8_gemm")
        if tcgemm.supports(backend, "scaled_gemm", tcgemm.W8A8_BLOCK):
            assert tcgemm.supports(backend, "scaled_gemm")
    # The scaled GEMM's own error names the backends it runs on: the same set supports() reports.
    a = torch.ones(2, 4, dtype=torch.int8)
    s = torch.ones(())
    with pytest.raises(ValueError) as err:
        tcgemm.scaled_gemm(a.cuda() if torch.cuda.is_available() else a, a.t(), s, s, backend="wmma")
    named = re.search(r"runs on backends (.*), not 'wmma'", str(err.value))
    if named is not None:  # on a GPU (the CPU refuses every GPU backend first)
        listed = named.group(1).replace(" and ", ", ").split(", ")
        assert listed == [b for b in tcgemm.BACKENDS if tcgemm.supports(b, "scaled_gemm")]
    assert not tcgemm.supports("wmma", "scaled_gemm")
    with pytest.raises(ValueError, match="argument 'op' must be one of"):
        tcgemm.supports("cpu", "conv")
    with pytest.raises(ValueError, match="argument 'backend' must be one of auto, cpu"):
        tcgemm.supports("tpu", "gemm")


@pytest.mark.gpu
def test_backends_for_a_gpu_are_its_available_ones():
    available = tcgemm.available_backends("cuda")
    scaled = tcgemm.backends_for("scaled_gemm", device="cuda")
    assert tcgemm.backends_for("gemm", device="cuda") == available
    assert scaled == [b for b in available if tcgemm.supports(b, "scaled_gemm")] and scaled

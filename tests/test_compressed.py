"""compressed-tensors W8A8 and W4A8 checkpoints (tcgemm.compressed), with the format's own library.

Checkpoints are made by compressed-tensors itself (apply_quantization_config, the weight scales
set from the float weights, ModelCompressor.compress_model, update_config) on a small model;
tcgemm loads them into QuantLinear layers, whose integer weights (int8, or 4-bit packed two to a
byte) times scales must be the library's decompressed weights exactly, and whose outputs must
match the float computation from the same integer values within the stated bound of the scaled
GEMM. tcgemm's saved checkpoints load back with the library (round trip). Every unsupported
scheme raises an error naming the config group and the setting.
"""

import json
import os
import sys

import pytest
import torch
from torch import nn

import tcgemm
from cases import assert_int8_layer_of_less_zero_points
from tcgemm.int4 import pack_int4
from tcgemm.reference import int4_weight_reference, quantize_reference, scaled_gemm_reference, unpack_int4_reference

ct = pytest.importorskip("compressed_tensors")
safetensors = pytest.importorskip("safetensors")
from compressed_tensors.compressors import ModelCompressor  # noqa: E402
from compressed_tensors.compressors.pack_quantized import pack_to_int32, unpack_from_int32  # noqa: E402
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    apply_quantization_config,
    preset_name_to_scheme,
)
from safetensors.torch import save_file  # noqa: E402

import tcgemm.compressed as tc  # noqa: E402


def _write_compressed(model, compressor, path):
    """Compresses ``model`` in place with compressed-tensors' ``compressor`` and writes it to ``path``
    as a checkpoint: model.safetensors (a tied tensor once, as transformers writes it) and the config."""
    compressor.compress_model(model)
    state, seen = {}, set()
    for k, v in model.state_dict().items():
        if v.data_ptr() not in seen:
            seen.add(v.data_ptr())
            state[k] = v.contiguous()
    os.makedirs(path, exist_ok=True)
    save_file(state, os.path.join(path, "model.safetensors"))
    compressor.update_config(str(path))


def float_model(seed=0):
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(256, 384), nn.ReLU(), nn.Linear(384, 256), nn.ReLU(), nn.Linear(256, 64))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model


def scheme(weights="channel", activations="token", overrides=None, asymmetric=False):
    overrides = overrides or {}
    w = {"channel": dict(strategy="channel"), "tensor": dict(strategy="tensor"),
         "group": dict(strategy="group", group_size=128),
         "block": dict(strategy="block", block_structure=[128, 128])}[weights]
    a = {"token": dict(strategy="token", dynamic=True), "static": dict(strategy="tensor", dynamic=False),
         "group": dict(strategy="group", group_size=128, dynamic=True)}[activations]
    w_args = dict(num_bits=8, type="int", symmetric=True, dynamic=False, **w)
    a_args = dict(num_bits=8, type="int", symmetric=not asymmetric, **a)
    w_args.update(overrides.get("weights", {}))
    a_args.update(overrides.get("input_activations", {}))
    return dict(weights=QuantizationArgs(**w_args), input_activations=QuantizationArgs(**a_args))


def make_checkpoint(path, weights="channel", activations="token", ignore=("4",), seed=0, asymmetric=False):
    """A checkpoint written by compressed-tensors: the float model's weights quantized by the
    library with scales from their max |w| (per channel, tensor, 1x128 group or 128x128 block); static input
    scales of 0.02 (asymmetric: zero points of -20). Returns the float model and the library's
    decompressed weights."""
    model = float_model(seed)
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], **scheme(weights, activations,
                                                                                    asymmetric=asymmetric))},
        ignore=list(ignore))
    apply_quantization_config(model, config)
    with torch.no_grad():
        for name, m in model.named_modules():
            if not hasattr(m, "weight_scale"):
                continue
            w = m.weight
            if weights == "channel":
                s = w.abs().amax(dim=1, keepdim=True) / 127
            elif weights == "tensor":
                s = w.abs().amax().reshape(m.weight_scale.shape) / 127
            elif weights == "group":  # K of every layer is a multiple of 128
                s = w.abs().reshape(w.shape[0], -1, 128).amax(dim=2) / 127
            else:
                n, k = w.shape
                pad = torch.zeros(-(-n // 128) * 128, -(-k // 128) * 128)
                pad[:n, :k] = w.abs()
                s = pad.reshape(pad.shape[0] // 128, 128, pad.shape[1] // 128, 128).amax(dim=(1, 3)) / 127
            m.weight_scale.copy_(s.reshape(m.weight_scale.shape))
            if hasattr(m, "input_scale"):
                m.input_scale.fill_(0.02)
            if asymmetric and hasattr(m, "input_zero_point"):
                m.input_zero_point.fill_(-20)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="int-quantized")
    compressor.compress_model(model)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    os.makedirs(path, exist_ok=True)
    save_file(state, os.path.join(path, "model.safetensors"))
    compressor.update_config(path)
    compressor.decompress_model(model)
    return float_model(seed), {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith(".weight")}


def reference_forward(model, x):
    """The model in float64 from the QuantLinear layers' own int8 values: activations quantized as
    tcgemm.quantize does (the reference), products exact, scales and bias in float64."""
    for m in model:
        if isinstance(m, tcgemm.QuantLinear):
            x32 = x.float()
            zx = None
            if m.asymmetric and m.activation_granularity == "static":
                qx, sx, zx = quantize_reference(x32, "tensor", m.input_scale.cpu().reshape(1), symmetric=False,
                                                zero_point=m.input_zero_point.cpu().reshape(1))
                zx = zx.expand(x32.shape[0])
            elif m.asymmetric:
                qx, sx, zx = quantize_reference(x32, "token", symmetric=False)
            elif m.activation_granularity == "static":
                qx, sx = quantize_reference(x32, "tensor", m.input_scale.cpu().reshape(1))
            else:
                qx, sx = quantize_reference(x32, {"token": "token", "block": "group"}[m.activation_granularity])
            sw = m.weight_scale.cpu()
            qw = m.weight.cpu()
            if qw.dtype == torch.uint8:  # 4-bit, packed: the int8 weight the GEMM runs on
                group_scale, zero_point = (getattr(m, name, None) for name in ("weight_group_scale", "weight_zero_point"))
                qw = unpack_int4_reference(qw, None if group_scale is None else group_scale.cpu(),
                                           None if zero_point is None else zero_point.cpu())
            x = scaled_gemm_reference(qx, qw.t(), sx, sw, m.bias.cpu() if m.bias is not None else None,
                                      return_float64=True, zero_point_a=zx).float()
        else:
            x = m(x.float()) if not isinstance(m, nn.Linear) else nn.functional.linear(x.float(), m.weight.cpu(), m.bias.cpu())
    return x


def assert_matches_reference(model, device):
    """The model's output on a fixed input against reference_forward's: the layers' outputs differ
    from the reference only by their final fp32 rounding (stated bound of scaled_gemm), which the
    next layer's quantization may move by one step."""
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model(x.to(device)).cpu()
        ref = reference_forward(model, x)
    assert torch.allclose(got, ref, rtol=1e-3, atol=2e-2 * float(ref.abs().max())), float((got - ref).abs().max())


@pytest.mark.parametrize("weights,activations,asymmetric", [
    ("channel", "token", False), ("channel", "static", False), ("tensor", "token", False), ("block", "group", False),
    ("block", "static", False), ("group", "token", False), ("group", "group", False), ("channel", "token", True),
    ("channel", "static", True), ("tensor", "static", True)])
def test_load_a_checkpoint_the_library_wrote(tmp_path, weights, activations, asymmetric, device):
    model, decompressed = make_checkpoint(str(tmp_path), weights, activations, asymmetric=asymmetric)
    report = tc.load_compressed(model.to(device), str(tmp_path))
    assert sorted(report.loaded) == ["0", "2"] and report.unused_keys == []
    assert isinstance(model[4], nn.Linear)  # ignored by the checkpoint's config
    for name in ("0", "2"):
        layer = model.get_submodule(name)
        assert isinstance(layer, tcgemm.QuantLinear)
        assert layer.activation_granularity == {"token": "token", "static": "static", "group": "block"}[activations]
        assert layer.asymmetric == asymmetric
        if asymmetric:
            assert torch.equal(layer.weight_colsum, layer.weight.sum(1, dtype=torch.int32))
            if activations == "static":
                assert int(layer.input_zero_point) == -20
        assert torch.equal(layer.dequantize_weight(torch.float32).cpu(), decompressed[f"{name}.weight"])
    assert_matches_reference(model, device)


@pytest.mark.parametrize("weight,activation,asymmetric", [("channel", "token", False), ("channel", "static", False),
                                                         ("block", "block", False), ("group", "block", False),
                                                         ("channel", "token", True), ("channel", "static", True)])
def test_round_trip_through_the_library(tmp_path, weight, activation, asymmetric):
    """tcgemm saves, the library reads the config and decompresses the weights; tcgemm loads its
    own checkpoint back to the same buffers and outputs."""
    model = float_model(3)
    calibration = None
    if activation == "static":
        calibration = tcgemm.nn.Calibration()
        calibration.update({"0": torch.full((256,), 2.0), "2": torch.full((384,), 1.0)})
        calibration.ranges.update({"0": (torch.full((256,), -0.5), torch.full((256,), 2.0)),
                                   "2": (torch.zeros(384), torch.full((384,), 1.0))})
    tcgemm.quantize_model(model, weight=weight, activation=activation, skip=["4"], calibration=calibration,
                          asymmetric=asymmetric)
    tc.save_compressed(model, str(tmp_path))
    qconfig = json.load(open(tmp_path / "config.json"))["quantization_config"]
    config = QuantizationConfig.model_validate(qconfig)
    assert config.config_groups["group_0"].input_activations.symmetric == (not asymmetric)
    plain = float_model(3)
    apply_quantization_config(plain, config)
    from safetensors.torch import load_file

    state = load_file(str(tmp_path / "model.safetensors"))
    missing, unexpected = plain.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    ModelCompressor(quantization_config=config).decompress_model(plain)
    for name in ("0", "2"):
        assert torch.equal(plain.get_submodule(name).weight.float(),
                           model.get_submodule(name).dequantize_weight(torch.float32))
    back = float_model(3)
    tc.load_compressed(back, str(tmp_path))
    for name in ("0", "2"):
        a, b = model.get_submodule(name), back.get_submodule(name)
        assert b.asymmetric == asymmetric
        for buf in ("weight", "weight_scale", "bias", "input_scale", "input_zero_point", "weight_colsum"):
            assert (getattr(a, buf) is None and getattr(b, buf) is None) or torch.equal(getattr(a, buf), getattr(b, buf))
    x = torch.randn(4, 256)
    with torch.no_grad():
        assert torch.equal(model(x), back(x))


@pytest.mark.parametrize("overrides,match", [
    (dict(weights=dict(symmetric=False)), r"weights are asymmetric 8-bit int: q - zero_point would span beyond int8"),
    (dict(input_activations=dict(symmetric=False, strategy="group", group_size=128, dynamic=True)),
     "asymmetric activations with weight strategy 'channel' and activation strategy 'group'"),
    (dict(weights=dict(strategy="group", group_size=128), input_activations=dict(symmetric=False)),
     "asymmetric activations with weight strategy 'group' and activation strategy 'token'"),
    (dict(weights=dict(strategy="group", group_size=64)),
     r"weight strategy 'group' \(group_size 64, block_structure None\) is not channel, tensor, group of 128 or "
     "128x128 block"),
    (dict(weights=dict(num_bits=4)), "weights are 4-bit int"),
    (dict(input_activations=dict(strategy="tensor", dynamic=True)), "input activation strategy 'tensor'"),
])
def test_unsupported_schemes_are_named(tmp_path, overrides, match):
    config = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], **scheme(overrides=overrides))},
                                format="int-quantized")
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": config.model_dump(mode="json")}))
    save_file({"0.weight": torch.zeros(384, 256, dtype=torch.int8)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=match):
        tc.load_compressed(float_model(), str(tmp_path))


def test_smooth_layers_cannot_be_saved(tmp_path):
    model = float_model()
    amax = {"0": torch.rand(256) + 0.5, "2": torch.rand(384) + 0.5}
    tcgemm.quantize_model(model, skip=["4"], calibration=amax, smooth=0.5)
    with pytest.raises(ValueError, match="SmoothQuant multipliers"):
        tc.save_compressed(model, str(tmp_path))


def _tiny_llama(transformers, intermediate_size):
    """A 2-layer LlamaForCausalLM with random weights (seed 0), its config and two prompts of 24 ids."""
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=intermediate_size,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(1))
    return config, model, ids


def _load_tiny_llama(transformers, path, decompressed):
    """The checkpoint at `path` loaded into a model built from its config, with the load report:
    every decoder projection (2 layers x 7) a QuantLinear whose dequantized weight is the library's
    (`decompressed`, by name), lm_head left float, no key unused."""
    loaded = transformers.LlamaForCausalLM(transformers.AutoConfig.from_pretrained(path)).eval()
    report = tc.load_compressed(loaded, str(path))
    assert len(report.loaded) == 2 * 7 and report.unused_keys == []
    assert isinstance(loaded.lm_head, nn.Linear)
    for name in report.loaded:
        layer = loaded.get_submodule(name)
        assert torch.equal(layer.dequantize_weight(torch.float32), decompressed[f"{name}.weight"].float()), name
    return loaded, report


def test_tiny_llama_checkpoint_through_transformers(tmp_path):
    """A LlamaForCausalLM quantized by the library (W8A8: int8 channel weights, dynamic token
    activations; lm_head ignored), saved with its config; tcgemm loads it into a model built from
    that config: every decoder projection becomes a QuantLinear with the library's dequantized
    weights, the logits stay close to the float model's, and greedy generation runs."""
    transformers = pytest.importorskip("transformers")
    config, model, ids = _tiny_llama(transformers, intermediate_size=688)
    with torch.no_grad():
        ref = model(ids).logits
    qconfig = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], **scheme("channel", "token"))},
        ignore=["lm_head"])
    apply_quantization_config(model, qconfig)
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "weight_scale"):
                m.weight_scale.copy_(m.weight.abs().amax(dim=1, keepdim=True) / 127)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="int-quantized")
    compressor.compress_model(model)
    config.save_pretrained(tmp_path)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    compressor.update_config(str(tmp_path))
    compressor.decompress_model(model)
    decompressed = {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith("proj.weight")}

    loaded, _ = _load_tiny_llama(transformers, tmp_path, decompressed)
    with torch.no_grad():
        out = loaded(ids).logits
        sqnr = float(10 * torch.log10(ref.double().pow(2).sum() / (ref.double() - out.double()).pow(2).sum()))
        assert sqnr > 28, sqnr
        assert loaded.generate(ids[:1, :8], max_new_tokens=6, do_sample=False).shape == (1, 14)


def _library_checkpoint(path, model, targets=("Linear",), ignore=()):
    """The library's W8A8 checkpoint of `model` (channel weights, token activations) in `path`."""
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=list(targets), **scheme("channel", "token"))},
        ignore=list(ignore))
    apply_quantization_config(model, config)
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "weight_scale"):
                m.weight_scale.copy_(m.weight.abs().amax(dim=1, keepdim=True).float() / 127)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="int-quantized")
    _write_compressed(model, compressor, path)


def test_checkpoint_and_model_must_agree(tmp_path):
    """What tcgemm would not use raises before the model changes: a bias on one side only, a
    quantized tensor no covered Linear takes, transforms and quantized KV caches in the config."""
    _library_checkpoint(tmp_path, float_model(), ignore=["4"])
    no_bias = float_model()
    no_bias[2] = nn.Linear(384, 256, bias=False)
    with pytest.raises(ValueError, match="'2' has a bias in the checkpoint but not in the model"):
        tc.load_compressed(no_bias, str(tmp_path))
    assert isinstance(no_bias[0], nn.Linear)  # untouched
    fewer = nn.Sequential(nn.Linear(256, 384), nn.ReLU(), nn.Identity(), nn.ReLU(), nn.Linear(256, 64))
    with pytest.raises(ValueError, match="quantized tensors of the checkpoint belong to no covered nn.Linear"):
        tc.load_compressed(fewer, str(tmp_path))
    config = json.load(open(tmp_path / "config.json"))
    for key, value, match in [("transform_config", {"config_groups": {"u": {}}}, "has a transform_config"),
                              ("kv_cache_scheme", {"num_bits": 8, "type": "int"}, "quantizes the KV cache")]:
        changed = dict(config, quantization_config=dict(config["quantization_config"], **{key: value}))
        (tmp_path / "config.json").write_text(json.dumps(changed))
        with pytest.raises(ValueError, match=match):
            tc.load_compressed(float_model(), str(tmp_path))


def test_targets_must_be_unshared_linears(tmp_path):
    _library_checkpoint(tmp_path, float_model(), ignore=["4"])
    model = nn.Sequential(nn.Embedding(256, 256), nn.ReLU(), nn.Linear(384, 256), nn.ReLU(), nn.Linear(256, 64))
    config = json.load(open(tmp_path / "config.json"))
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = ["re:^0$"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="covers '0', a Embedding; tcgemm quantizes nn.Linear layers only"):
        tc.load_compressed(model, str(tmp_path))
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = ["Linear"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    shared = float_model()
    shared.append(shared[0])  # one Linear under the names '0' and '5'
    with pytest.raises(ValueError, match="'5' and '0' are one shared Linear"):
        tc.load_compressed(shared, str(tmp_path))


def test_tied_embeddings_load_and_save(tmp_path):
    """A model whose lm_head shares the embedding (Llama-3.2-1B style): the checkpoint holds the
    tensor once; loading ties it again, saving writes it once."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    config.save_pretrained(tmp_path)
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    quantized = transformers.LlamaForCausalLM(config).eval()
    quantized.load_state_dict(state, strict=False)
    quantized.tie_weights()
    _library_checkpoint(tmp_path, quantized, ignore=["lm_head"])
    assert "lm_head.weight" not in set(safetensors.safe_open(str(tmp_path / "model.safetensors"), "pt").keys())
    loaded = transformers.LlamaForCausalLM(transformers.AutoConfig.from_pretrained(tmp_path)).eval()
    report = tc.load_compressed(loaded, str(tmp_path))
    assert len(report.loaded) == 7
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    assert torch.equal(loaded.model.embed_tokens.weight, model.model.embed_tokens.weight)
    out = tmp_path / "resaved"
    tc.save_compressed(loaded, str(out))
    keys = set(safetensors.safe_open(str(out / "model.safetensors"), "pt").keys())
    assert ("lm_head.weight" in keys) != ("model.embed_tokens.weight" in keys)


def _mutate(path, tensors=None, qconfig=None):
    """Rewrites the checkpoint in `path`: tensors(dict) and qconfig(dict) edit them in place."""
    from safetensors.torch import load_file

    if tensors is not None:
        state = load_file(str(path / "model.safetensors"))
        tensors(state)
        save_file(state, str(path / "model.safetensors"))
    if qconfig is not None:
        config = json.load(open(path / "config.json"))
        qconfig(config["quantization_config"])
        (path / "config.json").write_text(json.dumps(config))


def _set(d, key, value):
    d[key] = value


def _group(q):
    return q["config_groups"]["group_0"]


@pytest.mark.parametrize("case", [
    ("tensors", lambda t: t.__setitem__("0.weight", t["0.weight"].float()), r"'0.weight' must be int8 \[384, 256\], got torch.float32 \[384, 256\] \(is the checkpoint int-quantized\?\)"),
    ("tensors", lambda t: t.__setitem__("0.weight", t["0.weight"][:100]), r"'0.weight' must be int8 \[384, 256\], got torch.int8 \[100, 256\]"),
    ("tensors", lambda t: t.pop("2.weight_scale"), "the checkpoint has no '2.weight_scale'"),
    ("tensors", lambda t: t.__setitem__("2.weight_scale", t["2.weight_scale"][:5]), r"'2.weight_scale' must be \[256, 1\], got \[5, 1\]"),
    ("tensors", lambda t: t.__setitem__("0.input_zero_point", torch.ones(1, dtype=torch.int8)), r"'0.input_zero_point' is not zero, but the config group's activations are symmetric or dynamic"),
    ("tensors", lambda t: t.__setitem__("0.weight_zero_point", torch.ones(384, 1, dtype=torch.int8)), r"'0.weight_zero_point' is not zero \(weight zero points are not supported\)"),
    ("tensors", lambda t: t.pop("4.weight"), r"the checkpoint lacks 1 tensors of the model, e.g. \['4.weight'\]"),
    ("qconfig", lambda q: _set(q, "format", "float-quantized"), "checkpoint format 'float-quantized' is not 'int-quantized', 'naive-quantized', 'pack-quantized' or 'mixed-precision'"),
    ("qconfig", lambda q: _set(_group(q), "format", "float-quantized"), "config group 'group_0': format 'float-quantized' is not 'int-quantized', 'naive-quantized' or 'pack-quantized'"),
    ("qconfig", lambda q: (_set(q, "format", "mixed-precision"), _group(q).pop("format")), "config group 'group_0' has no format of its own in a 'mixed-precision' checkpoint"),
    ("qconfig", lambda q: _set(_group(q), "output_activations", {"num_bits": 8}), "config group 'group_0' quantizes output activations"),
    ("qconfig", lambda q: _set(q["config_groups"], "group_1", dict(_group(q), targets=["re:^0$"])), r"layer '0' matches config groups \['group_0', 'group_1'\]"),
], ids=lambda c: c[2][:40] if isinstance(c, tuple) else str(c))
def test_bad_checkpoints_are_named(tmp_path, case):
    _library_checkpoint(tmp_path, float_model(), ignore=["4"])
    kind, edit, match = case
    _mutate(tmp_path, **{kind: edit})
    with pytest.raises(ValueError, match="tcgemm.compressed: " + match):
        tc.load_compressed(float_model(), str(tmp_path))


def test_bad_scale_shapes_of_tensor_and_block_weights_and_static_inputs(tmp_path):
    for weights, activations, key, bad, match in [
        ("tensor", "token", "0.weight_scale", torch.ones(2), r"'0.weight_scale' must have one element, got \[2\]"),
        ("block", "group", "0.weight_scale", torch.ones(3, 3), r"'0.weight_scale' must be \[3, 2\] for 128x128 blocks, got \[3, 3\]"),
        ("group", "token", "0.weight_scale", torch.ones(3, 2), r"'0.weight_scale' must be \[384, 2\] for groups of 128, got \[3, 2\]"),
        ("channel", "static", "0.input_scale", torch.ones(2), r"'0.input_scale' must have one element, got \[2\]"),
        ("channel", "static", "0.input_zero_point", torch.tensor([200], dtype=torch.int32),
         r"'0.input_zero_point' must be one integer in \[-128, 127\], got torch.int32 \[1\]"),
        ("channel", "static", "0.input_zero_point", torch.zeros(2, dtype=torch.int8),
         r"'0.input_zero_point' must be one integer in \[-128, 127\], got torch.int8 \[2\]"),
        ("channel", "static", "0.input_zero_point", None, "the checkpoint has no '0.input_zero_point'"),
    ]:
        asymmetric = key.endswith("zero_point")
        path = tmp_path / f"{weights}-{activations}-{key}-{bad is None or bad.numel()}"
        make_checkpoint(str(path), weights, activations, asymmetric=asymmetric)
        _mutate(path, tensors=lambda t: t.pop(key) if bad is None else t.__setitem__(key, bad))
        with pytest.raises(ValueError, match="tcgemm.compressed: " + match):
            tc.load_compressed(float_model(), str(path))


def test_not_a_checkpoint_and_nothing_to_save(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="has no compressed-tensors quantization_config"):
        tc.load_compressed(float_model(), str(tmp_path))
    _library_checkpoint(tmp_path, float_model(), ignore=["4"])
    os.remove(tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="tcgemm.compressed: no .safetensors files in"):
        tc.load_compressed(float_model(), str(tmp_path))
    os.makedirs(tmp_path / "one")
    _library_checkpoint(tmp_path / "one", nn.Linear(256, 384))
    with pytest.raises(ValueError, match="tcgemm.compressed: the model itself is a Linear"):
        tc.load_compressed(nn.Linear(256, 384), str(tmp_path / "one"))
    with pytest.raises(ValueError, match="tcgemm.compressed: the model has no QuantLinear layers to save"):
        tc.save_compressed(float_model(), str(tmp_path / "out"))
    monkeypatch.setitem(sys.modules, "compressed_tensors.quantization", None)
    with pytest.raises(ImportError, match=r"tcgemm.compressed needs the 'compressed-tensors' package"):
        tc.save_compressed(float_model(), str(tmp_path / "out"))


# -- 4-bit weights (W4A8, W4A16) ------------------------------------------------------------------


def set_amax_group_scales(model, group_size):
    """Each quantized layer's weight_scale: the amax of each group of its weight over 7 (the K of
    every layer a multiple of group_size)."""
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "weight_scale"):
                w = m.weight.float()
                amax = w.abs().reshape(w.shape[0], -1, group_size).amax(dim=2)
                m.weight_scale.copy_((amax / 7).to(m.weight_scale.dtype))


def make_int4_checkpoint(path, preset="W4A16", quantization_format=None, ignore=("4",), seed=0, model=None):
    """A 4-bit checkpoint written by compressed-tensors: its preset scheme (4-bit symmetric
    weights in groups of 128; W4A8 adds dynamic per-token int8 activations) with scales amax / 7
    per group, compressed in the format the library infers (W4A16: pack-quantized, W4A8:
    int-quantized) or in `quantization_format`. Returns the float model and the library's
    decompressed weights."""
    model = float_model(seed) if model is None else model
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    config = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(preset, ["Linear"])},
                                ignore=list(ignore))
    apply_quantization_config(model, config)
    set_amax_group_scales(model, 128)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=quantization_format)
    _write_compressed(model, compressor, path)
    compressor.decompress_model(model)
    decompressed = {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith(".weight")}
    plain = float_model(seed) if isinstance(model, nn.Sequential) else None
    if plain is not None:
        plain.load_state_dict(fresh)
    return plain, decompressed


@pytest.mark.parametrize("k", [256, 264, 260, 6, 2])
def test_pack_quantized_words_are_tcgemm_bytes(k):
    """compressed-tensors' pack_to_int32 (q + 8, eight values a word, value i at bits 4i, the
    last word zero-padded) and tcgemm's packed bytes (two's complement, k = 2j low nibble) convert
    into each other exactly, padding included."""
    g = torch.Generator().manual_seed(k)
    q = torch.randint(-8, 8, (5, k), dtype=torch.int8, generator=g)
    q[0, :2] = torch.tensor([-8, 7])  # both ends of the range
    words = pack_to_int32(q, 4)
    assert words.shape == (5, -(-k // 8)) and words.dtype == torch.int32
    assert torch.equal(tc._unpack_checkpoint_int4("w", words, torch.tensor([5, k]), 5, k), pack_int4(q))
    assert torch.equal(tc._pack_checkpoint_int4(pack_int4(q)), words)
    assert torch.equal(unpack_from_int32(tc._pack_checkpoint_int4(pack_int4(q)), 4, torch.Size([5, k])), q)


@pytest.mark.parametrize("preset,quantization_format,stored", [
    ("W4A16", None, "pack-quantized"), ("W4A8", "pack-quantized", "pack-quantized"), ("W4A8", None, "int-quantized")])
def test_load_a_4bit_checkpoint_the_library_wrote(tmp_path, preset, quantization_format, stored, device):
    """W4A16 (weight-only: runs with dynamic per-token int8 activations) and W4A8 checkpoints,
    packed or one 4-bit value per int8, load into 4-bit QuantLinear layers with float group
    scales whose dequantized weights are the library's decompressed ones exactly."""
    model, decompressed = make_int4_checkpoint(str(tmp_path), preset, quantization_format)
    qconfig = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qconfig["format"] == stored and qconfig["config_groups"]["group_0"]["format"] == stored
    report = tc.load_compressed(model.to(device), str(tmp_path))
    assert sorted(report.loaded) == ["0", "2"] and report.unused_keys == []
    assert isinstance(model[4], nn.Linear)
    for name in ("0", "2"):
        layer = model.get_submodule(name)
        assert isinstance(layer, tcgemm.QuantLinear)
        assert layer.scheme == tcgemm.PRESETS["w4a8-group"]
        assert layer.weight.dtype == torch.uint8 and layer.weight.shape == (layer.out_features, layer.in_features // 2)
        assert layer.weight_scale.shape == (layer.out_features, layer.in_features // 128)
        assert layer.weight_group_scale is None
        assert torch.equal(layer.dequantize_weight(torch.float32).cpu(), decompressed[f"{name}.weight"])
    assert_matches_reference(model, device)


def _library_reads(path, seed):
    """The float weights compressed-tensors decompresses from the checkpoint in `path`."""
    from safetensors.torch import load_file

    config = QuantizationConfig.model_validate(json.load(open(path / "config.json"))["quantization_config"])
    plain = float_model(seed)
    apply_quantization_config(plain, config)
    compressor = ModelCompressor(quantization_config=config)
    with torch.no_grad():
        for m in plain.modules():
            if hasattr(m, "weight_scale"):
                m.weight_scale.fill_(1.0)
    compressor.compress_model(plain)  # the compressed layout (weight_packed, ...), as transformers loads it
    missing, unexpected = plain.load_state_dict(load_file(str(path / "model.safetensors")), strict=False)
    assert not unexpected and not missing, (unexpected, missing)
    compressor.decompress_model(plain)
    return config, plain


def assert_4bit_saves_back(model, out, decompressed, symmetric, group_size):
    """`model` (layers "0" and "2" 4-bit) saved into `out` is a pack-quantized checkpoint of
    `symmetric` weights in groups of `group_size` that the library decompresses to `decompressed`
    and that tcgemm loads back bit for bit."""
    tc.save_compressed(model, str(out))
    config, plain = _library_reads(out, 0)
    weights = config.config_groups["group_0"].weights
    assert config.format == "pack-quantized" and weights.symmetric == symmetric and weights.group_size == group_size
    for name in ("0", "2"):
        assert torch.equal(plain.get_submodule(name).weight, decompressed[f"{name}.weight"])
    again = float_model(0)
    tc.load_compressed(again, str(out))
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key


@pytest.mark.parametrize("preset", ["w4a8-group", "w4a8"])
def test_4bit_round_trip_through_the_library(tmp_path, preset):
    """tcgemm saves 4-bit layers pack-quantized (symmetric, groups of 128); the library decompresses
    them to the layers' weights (two-level layers: their float group scales, rounded once to fp32);
    tcgemm loads them back with the same weights, scales and outputs: two-level layers as two-level
    ones, their saved group scales factored back (tcgemm.int4.factor_group_scales) into the very
    channel scales and integer group scales they were saved from."""
    model = float_model(3)
    tcgemm.quantize_model(model, scheme=preset, skip=["4"])
    tc.save_compressed(model, str(tmp_path))
    qconfig = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qconfig["format"] == "pack-quantized"
    group = qconfig["config_groups"]["group_0"]
    assert group["format"] == "pack-quantized"
    assert {k: group["weights"][k] for k in ("num_bits", "type", "strategy", "group_size", "symmetric")} == dict(
        num_bits=4, type="int", strategy="group", group_size=128, symmetric=True)
    assert group["input_activations"]["strategy"] == "token" and group["input_activations"]["dynamic"] is True
    config, plain = _library_reads(tmp_path, 3)
    back = float_model(3)
    tc.load_compressed(back, str(tmp_path))
    for name in ("0", "2"):
        a, b = model.get_submodule(name), back.get_submodule(name)
        library = plain.get_submodule(name).weight.float()
        assert torch.equal(b.weight, a.weight) and b.scheme == tcgemm.PRESETS[preset]
        exact = int4_weight_reference(a.weight, a.weight_scale, a.weight_group_scale)
        assert exact.ne(0).any()
        if preset == "w4a8-group":
            assert torch.equal(b.weight_scale, a.weight_scale)
            assert torch.equal(library, a.dequantize_weight(torch.float32))
            assert torch.equal(b.dequantize_weight(torch.float32), library)
        else:  # q * fp32(scale * group_scale): within two fp32 roundings of the exact two-level weight
            saved = a.weight_scale[:, None] * a.weight_group_scale.float()
            assert torch.equal(b.weight_scale[:, None] * b.weight_group_scale.float(), saved)
            # the quantizer's two-level scales are the factoring the reader finds (every row here
            # has nonzero groups): the same integers and channel scales come back
            assert torch.equal(b.weight_scale, a.weight_scale)
            assert torch.equal(b.weight_group_scale, a.weight_group_scale)
            assert ((library.double() - exact).abs() <= exact.abs() * 2.0**-22).all()
        assert torch.equal(b.bias, a.bias)
    x = torch.randn(4, 256)
    with torch.no_grad():
        assert torch.equal(back(x), model(x))


def test_mixed_int8_and_int4_layers_round_trip(tmp_path):
    """A model with int8 and 4-bit layers is written as compressed-tensors does: each config group
    names its format (int-quantized, pack-quantized), the checkpoint's is mixed-precision; the
    library decompresses both and tcgemm loads both back."""
    model = float_model(4)
    tcgemm.quantize_model(model, scheme="w8a8", skip=["2", "4"])
    tcgemm.quantize_model(model, scheme="w4a8-group", skip=["0", "4"])
    tc.save_compressed(model, str(tmp_path))
    qconfig = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qconfig["format"] == "mixed-precision"
    formats = {g["weights"]["num_bits"]: g["format"] for g in qconfig["config_groups"].values()}
    assert formats == {8: "int-quantized", 4: "pack-quantized"}
    _, plain = _library_reads(tmp_path, 4)
    back = float_model(4)
    report = tc.load_compressed(back, str(tmp_path))
    assert sorted(report.loaded) == ["0", "2"]
    assert back[0].scheme == tcgemm.W8A8_DYNAMIC and back[2].scheme == tcgemm.PRESETS["w4a8-group"]
    for name in ("0", "2"):
        a, b = model.get_submodule(name), back.get_submodule(name)
        assert torch.equal(b.weight, a.weight) and torch.equal(b.weight_scale, a.weight_scale)
        assert torch.equal(plain.get_submodule(name).weight.float(), a.dequantize_weight(torch.float32))
    x = torch.randn(4, 256)
    with torch.no_grad():
        assert torch.equal(model(x), back(x))


def test_two_level_layers_with_asymmetric_activations_cannot_be_saved(tmp_path):
    model = float_model()
    scheme = tcgemm.QuantScheme(tcgemm.WeightArgs("channel", bits=4), tcgemm.ActivationArgs("token", symmetric=False))
    tcgemm.quantize_model(model, scheme=scheme, skip=["4"])
    with pytest.raises(ValueError, match=r"tcgemm.compressed: layer '0' \(.*\) would read back from the checkpoint "
                                         r"as .*asymmetric activations need weight='channel'"):
        tc.save_compressed(model, str(tmp_path))


def test_trivial_g_idx_loads(tmp_path):
    """GPTQ's activation ordering: a weight_g_idx of k // 128 (what actorder 'weight' amounts to,
    or 'group' where the order left the groups contiguous) or all -1 (unset) changes nothing."""
    model, decompressed = make_int4_checkpoint(str(tmp_path))
    _mutate(tmp_path, tensors=lambda t: (t.__setitem__("0.weight_g_idx", torch.arange(256, dtype=torch.int32) // 128),
                                         t.__setitem__("2.weight_g_idx", torch.full((384,), -1, dtype=torch.int32))),
            qconfig=lambda q: _set(_group(q)["weights"], "actorder", "group"))
    tc.load_compressed(model, str(tmp_path))
    for name in ("0", "2"):
        assert torch.equal(model.get_submodule(name).dequantize_weight(torch.float32), decompressed[f"{name}.weight"])


def _weights(q, **fields):
    q["config_groups"]["group_0"]["weights"].update(fields)


@pytest.mark.parametrize("case", [
    ("qconfig", lambda q: _weights(q, symmetric=False, group_size=64),
     r"weights are asymmetric 4-bit int with strategy 'group' \(group_size 64\)"),
    ("qconfig", lambda q: _weights(q, group_size=16), r"weights are 4-bit int with strategy 'group' \(group_size 16\)"),
    ("qconfig", lambda q: _weights(q, strategy="channel", group_size=None),
     "weights are 4-bit int with strategy 'channel'"),
    ("qconfig", lambda q: _weights(q, num_bits=2), "weights are 2-bit in format 'pack-quantized'"),
    ("qconfig", lambda q: _weights(q, num_bits=8), "weights are 8-bit in format 'pack-quantized'"),
    ("qconfig", lambda q: _weights(q, actorder="group"), None),
], ids=["asymmetric-group-64", "group-16", "channel", "2-bit", "8-bit", "g_idx"])
def test_unsupported_4bit_checkpoints_are_named(tmp_path, case):
    """Refusals name the config group and the setting."""
    make_int4_checkpoint(str(tmp_path))
    kind, edit, match = case
    if match is None:  # actorder 'group' with a g_idx that is not k // 128
        _mutate(tmp_path, tensors=lambda t: t.__setitem__("0.weight_g_idx", torch.arange(256, dtype=torch.int32) % 2))
        match = r"'0.weight_g_idx' puts the weight's columns in groups other than k // 128 \(activation ordering"
    _mutate(tmp_path, **{kind: edit})
    with pytest.raises(ValueError, match="tcgemm.compressed: config group 'group_0': " + match):
        tc.load_compressed(float_model(), str(tmp_path))


def make_grouped_4bit_checkpoint(path, group_size, quantization_format=None, ignore=("4",), seed=0,
                                 dtype=torch.float32):
    """A symmetric 4-bit weight-only checkpoint written by compressed-tensors with scales per
    group of `group_size` (32 or 64: W4A16's weights with a smaller group, as GPTQ checkpoints
    often have them), scales amax / 7 per group, compressed in the format the library infers
    (pack-quantized) or in `quantization_format`; of the model in `dtype` (the library's scales
    have the weights' dtype). Returns the float model (fp32) and the library's decompressed weights."""
    model = float_model(seed).to(dtype)
    weights = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=group_size)
    config = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)},
                                ignore=list(ignore))
    apply_quantization_config(model, config)
    set_amax_group_scales(model, group_size)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=quantization_format)
    _write_compressed(model, compressor, path)
    compressor.decompress_model(model)
    decompressed = {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith(".weight")}
    return float_model(seed), decompressed


@pytest.mark.parametrize("group_size", [32, 64])
@pytest.mark.parametrize("quantization_format", [None, "int-quantized"], ids=["pack-quantized", "int-quantized"])
def test_grouped_4bit_checkpoint_loads_at_4_bits(tmp_path, group_size, quantization_format, device):
    """Symmetric 4-bit weights with fp32 scales per group of 32 or 64 (compressed-tensors' own
    compressor, packed or one to an int8) load at 4 bits with their scales as [N, K/group_size]:
    the presets "w4a8-group32" / "w4a8-group64", weight-only run with dynamic per-token int8
    activations, the dequantized weights the library's decompressed ones bit for bit."""
    model, decompressed = make_grouped_4bit_checkpoint(str(tmp_path), group_size, quantization_format)
    qconfig = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qconfig["format"] == (quantization_format or "pack-quantized")
    assert qconfig["config_groups"]["group_0"]["weights"]["group_size"] == group_size
    report = tc.load_compressed(model.to(device), str(tmp_path))
    assert sorted(report.loaded) == ["0", "2"] and report.unused_keys == []
    assert report.loaded["0"] == f"weight=group, bits=4, group_size={group_size}, activation=token"
    for name in ("0", "2"):
        layer = model.get_submodule(name)
        assert isinstance(layer, tcgemm.QuantLinear)
        assert layer.scheme == tcgemm.PRESETS[f"w4a8-group{group_size}"] and layer.weight_group_scale is None
        n, k = layer.out_features, layer.in_features
        assert layer.weight.dtype == torch.uint8 and layer.weight.shape == (n, k // 2)
        assert layer.weight_scale.shape == (n, k // group_size)
        assert torch.equal(layer.dequantize_weight(torch.float32).cpu(), decompressed[f"{name}.weight"])
    assert_matches_reference(model, device)


@pytest.mark.parametrize("group_size", [32, 64])
def test_grouped_4bit_layers_save_as_the_library_reads_them(tmp_path, group_size):
    """Layers of groups of 32 or 64 (loaded from compressed-tensors' checkpoint, and quantized by
    tcgemm) save pack-quantized with their group size, which the library decompresses to the
    same weights and tcgemm loads back bit for bit; a model mixing group sizes writes one config
    group per size."""
    model, decompressed = make_grouped_4bit_checkpoint(str(tmp_path / "in"), group_size)
    tc.load_compressed(model, str(tmp_path / "in"))
    assert_4bit_saves_back(model, tmp_path / "out", decompressed, symmetric=True, group_size=group_size)
    mixed = float_model(5)
    tcgemm.quantize_model(mixed, scheme=f"w4a8-group{group_size}", skip=["2", "4"])
    tcgemm.quantize_model(mixed, scheme="w4a8-group", skip=["0", "4"])
    tc.save_compressed(mixed, str(tmp_path / "mixed"))
    qconfig = json.load(open(tmp_path / "mixed" / "config.json"))["quantization_config"]
    sizes = sorted(g["weights"]["group_size"] for g in qconfig["config_groups"].values())
    assert sizes == [group_size, 128] and qconfig["format"] == "pack-quantized"
    _, plain = _library_reads(tmp_path / "mixed", 5)
    back = float_model(5)
    tc.load_compressed(back, str(tmp_path / "mixed"))
    for name in ("0", "2"):
        a = mixed.get_submodule(name)
        assert back.get_submodule(name).scheme == a.scheme
        assert torch.equal(plain.get_submodule(name).weight.float(), a.dequantize_weight(torch.float32))
        assert torch.equal(back.get_submodule(name).weight_scale, a.weight_scale)


@pytest.mark.parametrize("group_size", [32, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_grouped_4bit_checkpoint_keeps_its_scale_dtype(tmp_path, group_size, dtype, device):
    """compressed-tensors' checkpoint of a bf16 (fp16) model holds its scales per 32 or 64 inputs
    in bf16 (fp16): the layers keep that table as it is; the library's decompression (q * scale in
    the scales' dtype) is the layer's dequantized weight in that dtype bit for bit, and the exact
    q * scale in fp32; the outputs the reference's. Saved back, the tables keep their dtype, the
    library decompresses them to the layers' weights and tcgemm loads them back bit for bit."""
    from safetensors.torch import load_file

    model, decompressed = make_grouped_4bit_checkpoint(str(tmp_path / "in"), group_size, dtype=dtype)
    stored = load_file(str(tmp_path / "in" / "model.safetensors"))
    tc.load_compressed(model.to(device), str(tmp_path / "in"))
    for name in ("0", "2"):
        layer, scale = model.get_submodule(name), stored[f"{name}.weight_scale"]
        assert scale.dtype == dtype and layer.weight_scale.dtype == dtype
        assert torch.equal(layer.weight_scale.cpu(), scale)
        assert torch.equal(layer.dequantize_weight(dtype).cpu(), decompressed[f"{name}.weight"])
        q = unpack_from_int32(stored[f"{name}.weight_packed"], 4, torch.Size(stored[f"{name}.weight_shape"].tolist()))
        exact = q.float() * scale.float().repeat_interleave(group_size, dim=1)
        assert torch.equal(layer.dequantize_weight(torch.float32).cpu(), exact)
    assert_matches_reference(model, device)
    tc.save_compressed(model, str(tmp_path / "out"))
    saved = load_file(str(tmp_path / "out" / "model.safetensors"))
    _, plain = _library_reads(tmp_path / "out", 0)
    back = float_model(0)
    tc.load_compressed(back, str(tmp_path / "out"))
    for name in ("0", "2"):
        layer = model.get_submodule(name)
        assert saved[f"{name}.weight_scale"].dtype == dtype
        assert torch.equal(saved[f"{name}.weight_scale"], stored[f"{name}.weight_scale"])
        assert torch.equal(plain.get_submodule(name).weight, layer.dequantize_weight(torch.float32).cpu())
    for key, value in model.state_dict().items():
        assert back.state_dict()[key].dtype == value.dtype and torch.equal(back.state_dict()[key], value.cpu()), key


def test_4bit_checkpoint_of_groups_of_128_in_bf16_loads_fp32(tmp_path):
    """Scales per 128 inputs (and two-level ones factored from them) stay fp32 in the layer,
    whatever the checkpoint's dtype: the values the library decompresses, converted exactly."""
    model = float_model(0).to(torch.bfloat16)
    plain, decompressed = make_int4_checkpoint(str(tmp_path), model=model)
    tc.load_compressed(plain, str(tmp_path))
    for name in ("0", "2"):
        layer = plain.get_submodule(name)
        assert layer.weight_scale.dtype == torch.float32
        assert torch.equal(layer.dequantize_weight(torch.bfloat16), decompressed[f"{name}.weight"])


def test_grouped_4bit_g_idx_of_its_groups_loads(tmp_path):
    """GPTQ's weight_g_idx of k // 32 (contiguous groups of the checkpoint's size) changes nothing;
    one of k // 128 is another grouping, refused naming the group size."""
    model, decompressed = make_grouped_4bit_checkpoint(str(tmp_path), 32)
    _mutate(tmp_path, tensors=lambda t: t.__setitem__("0.weight_g_idx", torch.arange(256, dtype=torch.int32) // 32))
    tc.load_compressed(model, str(tmp_path))
    assert torch.equal(model[0].dequantize_weight(torch.float32), decompressed["0.weight"])
    _mutate(tmp_path, tensors=lambda t: t.__setitem__("0.weight_g_idx", torch.arange(256, dtype=torch.int32) // 128))
    with pytest.raises(ValueError, match=r"'0.weight_g_idx' puts the weight's columns in groups other than k // 32"):
        tc.load_compressed(float_model(), str(tmp_path))


def test_grouped_4bit_scales_of_another_group_size_are_named(tmp_path):
    """A table whose width is not K / group_size of the config group is refused (tcgemm would
    otherwise read its width as another group size)."""
    make_grouped_4bit_checkpoint(str(tmp_path), 64)
    _mutate(tmp_path, tensors=lambda t: t.__setitem__("0.weight_scale", t["0.weight_scale"][:, :2].contiguous()))
    with pytest.raises(ValueError, match=r"tcgemm.compressed: '0.weight_scale' must be \[384, 4\] for groups of 64, "
                                         r"got \[384, 2\]"):
        tc.load_compressed(float_model(), str(tmp_path))


def make_asymmetric_4bit_checkpoint(path, strategy="group", quantization_format=None, seed=0, model=None,
                                    ignore=("4",), shift=0.12):
    """An asymmetric 4-bit weight-only checkpoint written by compressed-tensors (W4A16_ASYM's
    weights: per group of 128, or per channel), scales (max - min) / 15 and zero points
    round(-8 - min / scale) per group, the weights' rows shifted by -shift .. shift so that the
    zero points cover [-8, 7]; compressed in the format the library infers (pack-quantized: the weights and the
    zero points, along the output channels, packed eight to an int32) or in `quantization_format`.
    Returns the float model (with `model`: None), the library's decompressed weights and the zero
    points."""
    given = model is not None
    model = model if given else float_model(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.add_(torch.linspace(-shift, shift, m.out_features).reshape(-1, 1))
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    weights = QuantizationArgs(num_bits=4, type="int", symmetric=False, strategy=strategy,
                               group_size=128 if strategy == "group" else None)
    config = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)},
                                ignore=list(ignore))
    apply_quantization_config(model, config)
    zero_points = {}
    with torch.no_grad():
        for name, m in model.named_modules():
            if hasattr(m, "weight_scale"):
                w = m.weight.float()
                g = w.reshape(w.shape[0], -1, 128) if strategy == "group" else w.reshape(w.shape[0], 1, -1)
                lo, hi = g.amin(dim=2).clamp(max=0), g.amax(dim=2).clamp(min=0)
                scale = (hi - lo) / 15
                zp = torch.round(-8 - lo / scale).clamp(-8, 7)
                m.weight_scale.copy_(scale.to(m.weight_scale.dtype))
                m.weight_zero_point.copy_(zp.to(m.weight_zero_point.dtype))
                zero_points[name] = zp.to(torch.int8)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=quantization_format)
    _write_compressed(model, compressor, path)
    compressor.decompress_model(model)
    decompressed = {k: v.detach().clone() for k, v in model.state_dict().items() if k.endswith(".weight")}
    if given:
        return None, decompressed, zero_points
    plain = float_model(seed)
    plain.load_state_dict(fresh)
    return plain, decompressed, zero_points


@pytest.mark.parametrize("strategy", ["group", "channel"])
@pytest.mark.parametrize("quantization_format", [None, "int-quantized"], ids=["pack-quantized", "int-quantized"])
def test_asymmetric_4bit_checkpoint_loads_at_4_bits(tmp_path, strategy, quantization_format, device):
    """Asymmetric 4-bit weights (W4A16_ASYM, what AWQ checkpoints hold) load exactly at their size:
    packed 4-bit with an int8 zero point and the checkpoint's float scale per group of 128 (per
    channel ones repeated over the groups) and dynamic per-token activations, the dequantized
    weights the library's decompressed ones bit for bit, packed or not, every zero point in [-8,
    7] met; the layers' outputs those of the int8 layers of q - zero_point (bit for bit on the CPU)."""
    model, decompressed, zero_points = make_asymmetric_4bit_checkpoint(str(tmp_path), strategy, quantization_format)
    qconfig = json.load(open(tmp_path / "config.json"))["quantization_config"]
    assert qconfig["format"] == (quantization_format or "pack-quantized")
    assert sorted(torch.cat([z.reshape(-1) for z in zero_points.values()]).unique().tolist()) == list(range(-8, 8))
    report = tc.load_compressed(model.to(device), str(tmp_path))
    assert sorted(report.loaded) == ["0", "2"] and report.unused_keys == []
    for name in ("0", "2"):
        layer = model.get_submodule(name)
        assert isinstance(layer, tcgemm.QuantLinear)
        assert layer.scheme == tcgemm.PRESETS["w4a8-group-asymmetric"]
        n, k = layer.out_features, layer.in_features
        assert layer.weight.dtype == torch.uint8 and layer.weight.shape == (n, k // 2)
        zp = zero_points[name]
        assert torch.equal(layer.weight_zero_point.cpu(), zp if strategy == "group" else zp.expand(n, -(-k // 128)))
        assert torch.equal(layer.dequantize_weight(torch.float32).cpu(), decompressed[f"{name}.weight"])
        x = torch.randn(3, k, generator=torch.Generator().manual_seed(2)).to(device)
        assert_int8_layer_of_less_zero_points(layer(x), x, layer)
    assert_matches_reference(model, device)


def test_asymmetric_4bit_layers_save_as_the_library_reads_them(tmp_path):
    """A model loaded from an asymmetric 4-bit checkpoint saves as asymmetric 4-bit weights
    (pack-quantized, groups of 128, the zero points packed along the output channels), which the
    library decompresses to the same weights and tcgemm loads back bit for bit."""
    model, decompressed, _ = make_asymmetric_4bit_checkpoint(str(tmp_path / "asym"))
    tc.load_compressed(model, str(tmp_path / "asym"))
    assert_4bit_saves_back(model, tmp_path / "out", decompressed, symmetric=False, group_size=128)


@pytest.mark.parametrize("case", [
    (lambda t: t.pop("0.weight_zero_point"), r"the checkpoint has no '0.weight_zero_point'"),
    (lambda t: t.__setitem__("0.weight_zero_point", torch.zeros(384, 3, dtype=torch.int8)),
     r"'0.weight_zero_point' must be int32 \[48, 2\] \(packed eight to a word along the output channels\) or "
     r"int8 \[384, 2\], got torch.int8 \[384, 3\]"),
    (lambda t: t.__setitem__("0.weight_zero_point", torch.full((384, 2), 9, dtype=torch.int8)),
     r"'0.weight_zero_point' holds values in \[9, 9\], outside the \[-8, 7\]"),
], ids=["missing", "shape", "range"])
def test_bad_asymmetric_4bit_tensors_are_named(tmp_path, case):
    make_asymmetric_4bit_checkpoint(str(tmp_path))
    edit, match = case
    _mutate(tmp_path, tensors=edit)
    with pytest.raises(ValueError, match="tcgemm.compressed: " + match):
        tc.load_compressed(float_model(), str(tmp_path))


@pytest.mark.parametrize("case", [
    (lambda t: t.__setitem__("0.weight", t["0.weight"].float()),
     r"'0.weight' must be int8 \[384, 256\], got torch.float32 \[384, 256\] \(is the checkpoint int-quantized\?\)"),
    (lambda t: t["0.weight"].__setitem__((0, 0), 8), r"'0.weight' holds values in \[-8, 8\], outside the \[-8, 7\]"),
], ids=["dtype", "range"])
def test_bad_asymmetric_4bit_int_quantized_weights_are_named(tmp_path, case):
    """Asymmetric 4-bit weights one to an int8 (int-quantized): an int8 [N, K] in [-8, 7]."""
    make_asymmetric_4bit_checkpoint(str(tmp_path), quantization_format="int-quantized")
    edit, match = case
    _mutate(tmp_path, tensors=edit)
    with pytest.raises(ValueError, match="tcgemm.compressed: " + match):
        tc.load_compressed(float_model(), str(tmp_path))


def test_8bit_weight_only_pack_quantized_checkpoint_is_refused(tmp_path):
    """W8A16 as llm-compressor writes it (int8 weights packed four to an int32) is not read."""
    model = float_model()
    config = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme("W8A16", ["Linear"])}, ignore=["4"])
    apply_quantization_config(model, config)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    compressor.compress_model(model)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "model.safetensors"))
    compressor.update_config(str(tmp_path))
    with pytest.raises(ValueError, match="config group 'group_0': weights are 8-bit in format 'pack-quantized'"):
        tc.load_compressed(float_model(), str(tmp_path))


@pytest.mark.parametrize("case", [
    ("tensors", lambda t: t.__setitem__("0.weight_packed", t["0.weight_packed"][:, :5].contiguous()),
     r"'0.weight_packed' must be int32 \[384, 32\] \(4-bit values packed eight to a word\), "
     r"got torch.int32 \[384, 5\]"),
    ("tensors", lambda t: t.__setitem__("0.weight_shape", torch.tensor([384, 250])),
     r"'0.weight_shape' is \[384, 250\], but the layer is \[384, 256\]"),
    ("tensors", lambda t: t.pop("2.weight_packed"), "the checkpoint has no '2.weight_packed'"),
    ("tensors", lambda t: t.__setitem__("0.weight_scale", t["0.weight_scale"][:, :1].contiguous()),
     r"'0.weight_scale' must be \[384, 2\] for groups of 128, got \[384, 1\]"),
], ids=lambda c: c[2][:30] if isinstance(c, tuple) else str(c))
def test_bad_4bit_tensors_are_named(tmp_path, case):
    make_int4_checkpoint(str(tmp_path))
    kind, edit, match = case
    _mutate(tmp_path, **{kind: edit})
    with pytest.raises(ValueError, match="tcgemm.compressed: " + match):
        tc.load_compressed(float_model(), str(tmp_path))


@pytest.mark.parametrize("bad", [0.0, -3.0, float("nan"), float("inf")])
def test_4bit_group_scales_must_be_positive_and_finite(tmp_path, bad):
    """A checkpoint's 4-bit group scales are floats: any positive finite value is a scale (17
    included); 0, negative and non-finite ones are refused before the model changes."""
    make_int4_checkpoint(str(tmp_path))
    _mutate(tmp_path, tensors=lambda t: t["2.weight_scale"].view(-1)[5:7].fill_(bad))
    model = float_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"tcgemm.compressed: '2.weight_scale' \(the 4-bit weight's group scales\) "
                                         r"must hold finite values > 0, got 2 others"):
        tc.load_compressed(model, str(tmp_path))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_4bit_values_out_of_range_and_odd_in_features_are_named(tmp_path):
    make_int4_checkpoint(str(tmp_path / "a"), "W4A8")  # int-quantized: one 4-bit value per int8
    _mutate(tmp_path / "a", tensors=lambda t: t["0.weight"][0, :2].copy_(torch.tensor([9, -8])))
    with pytest.raises(ValueError, match=r"tcgemm.compressed: '0.weight' holds values in \[-8, 9\], outside the "
                                         r"\[-8, 7\] of the config group's 4-bit weights"):
        tc.load_compressed(float_model(), str(tmp_path / "a"))
    odd = nn.Sequential(nn.Linear(257, 64))
    qconfig = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme("W4A16", ["Linear"])},
                                 format="pack-quantized")
    os.makedirs(tmp_path / "b")
    (tmp_path / "b" / "config.json").write_text(json.dumps({"quantization_config": qconfig.model_dump(mode="json")}))
    save_file({"0.weight_packed": torch.zeros(64, 33, dtype=torch.int32)}, str(tmp_path / "b" / "model.safetensors"))
    with pytest.raises(ValueError, match="config group 'group_0' covers '0' with in_features 257; tcgemm's 4-bit "
                                         "weights need an even in_features"):
        tc.load_compressed(odd, str(tmp_path / "b"))


@pytest.mark.parametrize("symmetric", [True, False], ids=["W4A16", "W4A16_ASYM"])
def test_tiny_llama_4bit_checkpoint_through_transformers(tmp_path, symmetric):
    """A LlamaForCausalLM quantized by the library with 4-bit weights in groups of 128, lm_head
    ignored: W4A16 (the usual GPTQ checkpoint, pack-quantized) or W4A16_ASYM (with zero points, the
    layout of AWQ checkpoints by llm-compressor). It loads into a model built from its config:
    every projection a QuantLinear with dynamic per-token int8 activations and the library's
    dequantized weights (4-bit with float group scales; asymmetric: and zero points). The
    logits stay close to those of the same model in float with the library's dequantized weights
    (W4A16 as the library computes it): the int8 activations add little to the error of the
    4-bit weights. Greedy generation runs."""
    transformers = pytest.importorskip("transformers")
    config, model, ids = _tiny_llama(transformers, intermediate_size=768)
    config.save_pretrained(tmp_path)
    if symmetric:
        _, decompressed = make_int4_checkpoint(str(tmp_path), "W4A16", ignore=["lm_head"], model=model)
        scheme = tcgemm.PRESETS["w4a8-group"]
    else:
        _, decompressed, _ = make_asymmetric_4bit_checkpoint(str(tmp_path), model=model, ignore=["lm_head"],
                                                             shift=0.0)
        scheme = tcgemm.PRESETS["w4a8-group-asymmetric"]
    w4a16 = transformers.LlamaForCausalLM(config).eval()
    w4a16.load_state_dict({k: v for k, v in model.state_dict().items() if k in w4a16.state_dict()})
    loaded, report = _load_tiny_llama(transformers, tmp_path, decompressed)
    for name in report.loaded:
        assert loaded.get_submodule(name).scheme == scheme, name
        assert torch.equal(w4a16.get_submodule(name).weight, decompressed[f"{name}.weight"]), name
    with torch.no_grad():
        ref = w4a16(ids).logits
        out = loaded(ids).logits
        sqnr = float(10 * torch.log10(ref.double().pow(2).sum() / (ref.double() - out.double()).pow(2).sum()))
        assert sqnr > 28, sqnr
        assert loaded.generate(ids[:1, :8], max_new_tokens=6, do_sample=False).shape == (1, 14)

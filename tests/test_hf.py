"""tcgemm inside transformers: from_pretrained(..., quantization_config=TcgemmConfig(...))
quantizes each weight as it loads, and save_pretrained writes a compressed-tensors checkpoint.
CPU only; a tiny Llama built from a config and saved in float (no download)."""

import json

import pytest
import torch

import tcgemm

transformers = pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")
hf = pytest.importorskip("tcgemm.hf")
tc = pytest.importorskip("tcgemm.compressed")

IDS = torch.randint(0, 512, (2, 20), generator=torch.Generator().manual_seed(1))


def float_checkpoint(path, tied=False):
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=tied)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(path, max_shard_size="500KB")


@pytest.mark.parametrize("scheme", ["w8a8", "w4a8", "w8a8-block", "w4a8-group-asymmetric", "w4a8-group32"])
def test_quantize_on_load_equals_quantize_model_after_a_float_load(tmp_path, scheme):
    float_checkpoint(tmp_path / "float")
    ours = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "float"), quantization_config=hf.TcgemmConfig(scheme), dtype=torch.float32).eval()
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "float"), dtype=torch.float32).eval()
    report = tcgemm.quantize_model(ref, scheme=scheme, skip=["lm_head"])
    assert len(report.swapped) == 14
    a, b = ref.state_dict(), ours.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
    assert isinstance(ours.model.layers[1].mlp.down_proj, tcgemm.QuantLinear)
    assert isinstance(ours.lm_head, torch.nn.Linear) and not isinstance(ours.lm_head, tcgemm.QuantLinear)
    with torch.no_grad():
        assert torch.equal(ours(IDS).logits, ref(IDS).logits)
        assert ours.generate(IDS[:1, :6], max_new_tokens=4, do_sample=False).shape == (1, 10)


def test_fuse_on_load_stacks_the_siblings_and_saves_them_apart(tmp_path):
    from tcgemm.fuse import FusedSlice

    float_checkpoint(tmp_path / "float")
    kwargs = {"dtype": torch.float32}
    fused = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "float"), quantization_config=hf.TcgemmConfig("w4a8", fuse=True), **kwargs).eval()
    apart = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "float"), quantization_config=hf.TcgemmConfig("w4a8"), **kwargs).eval()
    attention, mlp = fused.model.layers[1].self_attn, fused.model.layers[1].mlp
    assert all(isinstance(getattr(attention, f"{p}_proj"), FusedSlice) for p in "qkv")
    assert isinstance(mlp.gate_proj, FusedSlice) and isinstance(mlp.up_proj, FusedSlice)
    with torch.no_grad():
        assert torch.equal(fused(IDS).logits, apart(IDS).logits)
    fused.save_pretrained(tmp_path / "fused")
    apart.save_pretrained(tmp_path / "apart")
    from safetensors.torch import load_file

    ours, theirs = load_file(str(tmp_path / "fused" / "model.safetensors")), \
        load_file(str(tmp_path / "apart" / "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert isinstance(fused.model.layers[1].self_attn.q_proj, FusedSlice)  # still fused after the save
    with pytest.raises(ValueError, match="fuse must be True or False"):
        hf.TcgemmConfig("w4a8", fuse="yes")


def test_save_pretrained_writes_compressed_tensors(tmp_path):
    float_checkpoint(tmp_path / "float", tied=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path / "float"), quantization_config=hf.TcgemmConfig("w8a8", skip=["lm_head", "*.o_proj"]),
        dtype=torch.float32).eval()
    assert not isinstance(model.model.layers[0].self_attn.o_proj, tcgemm.QuantLinear)
    model.save_pretrained(tmp_path / "quantized")
    qconfig = json.load(open(tmp_path / "quantized" / "config.json"))["quantization_config"]
    assert qconfig["quant_method"] == "compressed-tensors" and qconfig["format"] == "int-quantized"
    loaded = tc.from_pretrained(str(tmp_path / "quantized"), device="cpu", dtype=torch.float32)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        assert torch.equal(loaded(IDS).logits, model(IDS).logits)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "quantized"), dtype=torch.float32)
    layer = model.model.layers[0].mlp.up_proj
    assert torch.equal(theirs.model.layers[0].mlp.up_proj.weight.detach().to(torch.int8), layer.weight)


def test_config_is_checked_and_round_trips():
    config = hf.TcgemmConfig("w4a8", skip=["lm_head", "*.gate"])
    assert config.to_dict() == {"quant_method": "tcgemm", "scheme": "w4a8", "skip": ["lm_head", "*.gate"],
                                "fuse": False}
    assert hf.TcgemmConfig(**config.to_dict()).to_dict() == config.to_dict()
    with pytest.raises(ValueError, match="scheme must be one of 'w8a8', .* got 'w3a8'"):
        hf.TcgemmConfig("w3a8")
    with pytest.raises(ValueError, match="scheme 'w8a8-static' needs calibration data"):
        hf.TcgemmConfig("w8a8-static")
    with pytest.raises(ValueError, match=r"unknown arguments \['bits'\]"):
        hf.TcgemmConfig("w8a8", bits=4)


@pytest.mark.parametrize("fused", [False, True], ids=["apart", "fused"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_example_runs(tmp_path, compiled, fused):
    """examples/hf_llm.py on a tiny Llama folder: quantized on load, generate() with a static
    cache (under torch.compile too; with q/k/v and gate/up stacked too), saved, reloaded at its
    compressed size, the same tokens."""
    from examples import hf_llm

    float_checkpoint(tmp_path / "float")
    argv = [str(tmp_path / "float"), "--max-new-tokens", "4", "--out", str(tmp_path / "w4a8")]
    assert hf_llm.main(argv + (["--compile"] if compiled else []) + (["--fuse"] if fused else [])) == 0
    assert json.load(open(tmp_path / "w4a8" / "config.json"))["quantization_config"]["format"] == "pack-quantized"
    from safetensors import safe_open

    with safe_open(str(tmp_path / "w4a8" / "model.safetensors"), "pt") as f:  # the layers apart, fused or not
        names = set(f.keys())
    assert {f"model.layers.1.self_attn.{p}_proj.weight_packed" for p in "qkv"} <= names
    assert not any("fused" in name for name in names)


def test_a_checkpoint_marked_tcgemm_is_refused():
    quantizer = hf.TcgemmHfQuantizer(hf.TcgemmConfig("w8a8"), pre_quantized=True)
    with pytest.raises(ValueError, match="tcgemm saves compressed-tensors checkpoints; load them with "
                                         "tcgemm.compressed.from_pretrained"):
        quantizer.validate_environment()


@pytest.mark.parametrize("scheme", ["w8a8", "w4a8"])
def test_placeholders_count_as_the_quantized_bytes(scheme):
    """Before loading, each QuantLinear's weight is a float placeholder on the meta device (the
    float weight must arrive uncast); param_element_size counts it as the integer weight it
    becomes, so transformers' warm-up of the CUDA allocator reserves the quantized model's bytes."""
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    quantizer = hf.TcgemmHfQuantizer(hf.TcgemmConfig(scheme))
    quantizer._process_model_before_weight_loading(model)
    assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    expected = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    tcgemm.quantize_model(expected, scheme=scheme, skip=["lm_head"])
    placeholders, state = model.state_dict(), expected.state_dict()
    assert placeholders.keys() == state.keys()
    for key, tensor in placeholders.items():
        assert tensor.numel() * quantizer.param_element_size(model, key, tensor) == \
            state[key].numel() * state[key].element_size(), key


def test_a_weight_missing_from_the_checkpoint_is_named(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch")
    float_checkpoint(tmp_path / "float")
    path = tmp_path / "float"
    for shard in path.glob("*.safetensors"):
        tensors = safetensors.load_file(str(shard))
        if tensors.pop("model.layers.1.mlp.up_proj.weight", None) is not None:
            safetensors.save_file(tensors, str(shard), metadata={"format": "pt"})
    index = json.load(open(path / "model.safetensors.index.json"))
    del index["weight_map"]["model.layers.1.mlp.up_proj.weight"]
    json.dump(index, open(path / "model.safetensors.index.json", "w"))
    with pytest.raises(ValueError, match="layer 'model.layers.1.mlp.up_proj' got no weight from the checkpoint"):
        transformers.AutoModelForCausalLM.from_pretrained(str(path), quantization_config=hf.TcgemmConfig("w8a8"),
                                                          dtype=torch.float32)

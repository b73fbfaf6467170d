"""Checkpoints at their compressed size: sharded safetensors written as transformers writes them,
read tensor by tensor, and loaded into a model built on the meta device. CPU only; a tiny Llama
built from a config (no download)."""

import json
import os

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm import checkpoint

transformers = pytest.importorskip("transformers")
# Every test here saves a compressed-tensors checkpoint first.
pytest.importorskip("compressed_tensors")
tc = pytest.importorskip("tcgemm.compressed")


def tiny_llama(tied: bool):
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=tied)
    torch.manual_seed(0)
    return config, transformers.LlamaForCausalLM(config).eval()


def saved_model(path, scheme, tied, max_shard_size="5GB"):
    """A tiny Llama quantized with ``scheme`` (lm_head float), saved with its config."""
    config, model = tiny_llama(tied)
    tcgemm.quantize_model(model, scheme=scheme, skip=["lm_head"])
    config.save_pretrained(path)
    tc.save_compressed(model, str(path), max_shard_size=max_shard_size)
    return config, model


IDS = torch.randint(0, 512, (2, 20), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("scheme", ["w8a8", "w4a8"])
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_meta_device_load_equals_the_in_memory_load(tmp_path, scheme, tied):
    """from_pretrained builds the architecture on the meta device and streams the checkpoint in:
    the same tensors, bit for bit, as loading into a float model built in memory; the rotary
    tables are built again (they are never saved), tied embeddings are tied."""
    config, model = saved_model(tmp_path, scheme, tied, max_shard_size="300KB")
    assert os.path.exists(tmp_path / checkpoint.INDEX)
    in_memory = transformers.LlamaForCausalLM(transformers.AutoConfig.from_pretrained(tmp_path)).eval()
    report = tc.load_compressed(in_memory, str(tmp_path))
    assert len(report.loaded) == 14 and report.unused_keys == []
    streamed = tc.from_pretrained(str(tmp_path), device="cpu", dtype=torch.float32)
    a, b = in_memory.state_dict(), streamed.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        assert not b[key].is_meta and b[key].dtype == a[key].dtype and torch.equal(a[key], b[key]), key
    for name, buf in streamed.named_buffers():
        assert not buf.is_meta, name
    assert torch.equal(streamed.model.rotary_emb.inv_freq, in_memory.model.rotary_emb.inv_freq)
    if tied:
        assert streamed.lm_head.weight.data_ptr() == streamed.model.embed_tokens.weight.data_ptr()
    with torch.no_grad():
        out = streamed(IDS).logits
        assert torch.equal(out, in_memory(IDS).logits)
        if scheme == "w8a8":  # the same layers as before saving
            assert torch.equal(out, model(IDS).logits)
    assert streamed.model.layers[0].mlp.up_proj.scheme == tcgemm.PRESETS[scheme]


def test_sharded_save_is_what_transformers_writes(tmp_path):
    _, model = saved_model(tmp_path, "w8a8", False, max_shard_size="200KB")
    index = json.load(open(tmp_path / checkpoint.INDEX))
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    reader = checkpoint.Reader(str(tmp_path))
    assert sorted(reader.keys()) == sorted(index["weight_map"])
    sizes = {k: reader.load(k).numel() * reader.load(k).element_size() for k in reader.keys()}
    assert index["metadata"]["total_size"] == sum(sizes.values())
    for file in files:  # no shard above the limit unless it holds one tensor
        names = [k for k, f in index["weight_map"].items() if f == file]
        assert sum(sizes[k] for k in names) <= 200_000 or len(names) == 1
    # saving again with one shard removes the shards and the index
    tc.save_compressed(model, str(tmp_path))
    assert not os.path.exists(tmp_path / checkpoint.INDEX)
    assert [f for f in os.listdir(tmp_path) if f.endswith(".safetensors")] == [checkpoint.WEIGHTS]


def test_transformers_reads_a_sharded_tcgemm_checkpoint(tmp_path):
    """transformers (with compressed-tensors' quantizer) loads the shards tcgemm writes: its
    layers hold tcgemm's int8 weights and scales, and its logits are tcgemm's up to the rounding
    of the activations, which it keeps in float."""
    _, model = saved_model(tmp_path, "w8a8", False, max_shard_size="300KB")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, tcgemm.QuantLinear)]
    assert len(layers) == 14
    for name, module in layers:
        their = theirs.get_submodule(name)
        assert torch.equal(their.weight.detach().to(torch.int8), module.weight), name
        assert torch.equal(their.weight_scale.detach().float().reshape(-1), module.weight_scale), name
    with torch.no_grad():
        ref, out = model(IDS).logits.double(), theirs(IDS).logits.double()
    sqnr = float(10 * torch.log10(ref.pow(2).sum() / (ref - out).pow(2).sum()))
    assert sqnr > 30, sqnr


def test_meta_load_errors_name_the_tensor(tmp_path):
    saved_model(tmp_path, "w8a8", False)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match=r"tcgemm.compressed: layer 'model.layers.0.self_attn.q_proj' is on the "
                                         r"meta device; pass device="):
        tc.load_compressed(model, str(tmp_path))
    # a tensor the checkpoint lacks stays on the meta device: named
    from safetensors.torch import load_file, save_file

    state = load_file(str(tmp_path / checkpoint.WEIGHTS))
    del state["model.norm.weight"]
    save_file(state, str(tmp_path / checkpoint.WEIGHTS))
    with pytest.raises(ValueError, match=r"the checkpoint lacks 1 tensors of the model, e.g. \['model.norm.weight'\]"):
        tc.from_pretrained(str(tmp_path), device="cpu")


def test_a_buffer_nothing_can_rebuild_is_named(tmp_path):
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(256, 64)
            self.register_buffer("table", torch.ones(3), persistent=False)

    model = Holder()
    tcgemm.quantize_model(model, scheme="w8a8")
    tc.save_compressed(model, str(tmp_path))
    with torch.device("meta"):
        empty = Holder()
    with pytest.raises(ValueError, match=r"1 tensors of the model are still on the meta device after loading .* "
                                         r"e.g. \['table'\]"):
        tc.load_compressed(empty, str(tmp_path), device="cpu")


def test_parse_size_and_reader_errors(tmp_path):
    assert checkpoint.parse_size("5GB") == 5 * 10**9 and checkpoint.parse_size("2MiB") == 2 * 2**20
    assert checkpoint.parse_size(1000) == 1000
    for bad in ("5 parsecs", "-1GB", 0, "GB"):
        with pytest.raises(ValueError, match="max_shard_size must be"):
            checkpoint.parse_size(bad)
    with pytest.raises(ValueError, match="no .safetensors files in"):
        checkpoint.Reader(str(tmp_path))
    (tmp_path / checkpoint.INDEX).write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(ValueError, match=r"names 'model-00001-of-00002.safetensors' \(for 'a'\), which is missing"):
        checkpoint.Reader(str(tmp_path))


def test_writer_and_reader_refuse_ambiguous_names(tmp_path):
    with pytest.raises(ValueError, match="tensor name 'a' given twice"):
        checkpoint.write_sharded([("a", torch.zeros(2)), ("a", torch.ones(2))], str(tmp_path / "w"))
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(2)}, str(tmp_path / "one.safetensors"))
    save_file({"a": torch.ones(2)}, str(tmp_path / "two.safetensors"))
    with pytest.raises(ValueError, match="'a' is in both one.safetensors and two.safetensors"):
        checkpoint.Reader(str(tmp_path))


def test_load_state_names_shape_and_meta_errors(tmp_path):
    checkpoint.write_sharded([("0.weight", torch.ones(4, 3)), ("0.bias", torch.ones(4))], str(tmp_path))
    reader = checkpoint.Reader(str(tmp_path))
    with pytest.raises(ValueError, match=r"tcgemm.checkpoint: '0.weight' is \[4, 3\] in the checkpoint but \[4, 5\] "
                                         r"in the model"):
        checkpoint.load_state(nn.Sequential(nn.Linear(5, 4)), reader)
    with torch.device("meta"):
        empty = nn.Sequential(nn.Linear(3, 4))
    with pytest.raises(ValueError, match=r"'0.(weight|bias)' of the model is on the meta device; pass device="):
        checkpoint.load_state(empty, reader)
    assert checkpoint.load_state(empty, reader, "cpu") == []
    assert torch.equal(empty[0].weight, torch.ones(4, 3)) and not empty[0].bias.is_meta

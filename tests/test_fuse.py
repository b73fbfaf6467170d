"""tcgemm.fuse_siblings: sibling layers that read the same input (q/k/v, gate/up) stacked into one
QuantLinear. The fused model gives the unfused one's output (bit for bit on the CPU), one op per
group under torch.compile, unfuse_siblings gives the layers back bit for bit, and what cannot be
stacked or saved is refused with the reason."""

import copy

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm.fuse import FusedSiblings, FusedSlice

SCHEMES = ["w8a8", "w8a8-group", "w8a8-asymmetric", "w4a8", "w4a8-group", "w4a8-group-asymmetric", "w4a8-group32"]


class Block(nn.Module):
    """Attention-like: q, k, v read x; the biases differ (v only), the outputs are of three sizes."""

    def __init__(self, width=256, kv=64):
        super().__init__()
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, kv, bias=False)
        self.v_proj = nn.Linear(width, kv, bias=True)
        self.o_proj = nn.Linear(width + 2 * kv, width)

    def forward(self, x):
        return self.o_proj(torch.cat([self.q_proj(x), self.k_proj(x) * 2, self.v_proj(x)], dim=-1))


class Mlp(nn.Module):
    def __init__(self, width=256, hidden=384):
        super().__init__()
        self.gate_proj = nn.Linear(width, hidden, bias=False)
        self.up_proj = nn.Linear(width, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, width, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def model(device="cpu", seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(Block(), Mlp(), Block()).to(device)


def quantized(scheme, device="cpu"):
    m = model(device)
    recipe = {"scheme": scheme}
    if scheme == "w8a8-asymmetric":  # dynamic asymmetric activations
        recipe = {"asymmetric": True}
    tcgemm.quantize_model(m, **recipe)
    return m


def x_of(rows=5, device="cpu", seed=1):
    return torch.randn(rows, 256, generator=torch.Generator().manual_seed(seed)).to(device)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fused_model_equals_the_unfused_one_bit_for_bit(scheme):
    m = quantized(scheme)
    x = x_of()
    with torch.no_grad():
        want = m(x)
        report = tcgemm.fuse_siblings(m)
        assert report.fused == ["0.{q_proj,k_proj,v_proj}", "1.{gate_proj,up_proj}", "2.{q_proj,k_proj,v_proj}"]
        assert report.skipped == []
        assert isinstance(m[0].q_proj, FusedSlice) and isinstance(m[0].fused_q_proj_k_proj_v_proj, FusedSiblings)
        assert m[0].fused_q_proj_k_proj_v_proj.layer.out_features == 256 + 64 + 64
        assert (m[0].k_proj.in_features, m[0].k_proj.out_features) == (256, 64)
        got = m(x)
        assert torch.equal(got, want)
        assert torch.equal(m(x_of(rows=3, seed=2)), quantized(scheme)(x_of(rows=3, seed=2)))


@pytest.mark.parametrize("scheme", ["w8a8", "w4a8-group-asymmetric", "w4a8-group64"])
def test_unfuse_gives_the_layers_back_bit_for_bit(scheme):
    m = quantized(scheme)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    tcgemm.fuse_siblings(m)
    assert tcgemm.unfuse_siblings(m) == 3
    assert not any(isinstance(sub, (FusedSiblings, FusedSlice)) for sub in m.modules())
    after = m.state_dict()
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert after[key].dtype == value.dtype and torch.equal(after[key], value), key
    assert all(type(m[0]._modules[n]) is tcgemm.QuantLinear for n in ("q_proj", "k_proj", "v_proj"))
    assert m[0].q_proj.bias is None and m[0].v_proj.bias is not None
    x = x_of()
    assert torch.equal(m(x), quantized(scheme)(x))


def test_siblings_reuse_one_output_per_input_and_recompute_for_another():
    m = quantized("w8a8")
    tcgemm.fuse_siblings(m)
    block, fused = m[0], m[0].fused_q_proj_k_proj_v_proj
    calls = []
    fused.layer.register_forward_hook(lambda *args: calls.append(1))
    x, y = x_of(seed=3), x_of(seed=4)
    ref = quantized("w8a8")[0]
    with torch.no_grad():
        q, k, v = block.q_proj(x), block.k_proj(x), block.v_proj(x)
        assert len(calls) == 1 and fused._input is None  # every sibling served: nothing kept
        assert torch.equal(q, ref.q_proj(x)) and torch.equal(k, ref.k_proj(x)) and torch.equal(v, ref.v_proj(x))
        # Cross-attention's order: q on one input, k and v on another.
        q, k, v = block.q_proj(x), block.k_proj(y), block.v_proj(y)
        assert len(calls) == 3
        assert torch.equal(q, ref.q_proj(x)) and torch.equal(k, ref.k_proj(y)) and torch.equal(v, ref.v_proj(y))
        # The same sibling twice on one input: the second call computes again.
        calls.clear()
        assert torch.equal(block.q_proj(x), ref.q_proj(x)) and torch.equal(block.q_proj(x), ref.q_proj(x))
        assert len(calls) == 2
        # An input modified in place between the siblings is not served the stale output.
        block._modules["fused_q_proj_k_proj_v_proj"]._clear()
        z = x.clone()
        block.q_proj(z)
        z.mul_(2)
        assert torch.equal(block.k_proj(z), ref.k_proj(z))


def test_fused_tiny_llama_compiles_to_one_op_per_group_and_decodes():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=384, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(config).eval()
    tcgemm.quantize_model(m, scheme="w4a8", skip=("lm_head",))
    plain = copy.deepcopy(m)
    report = tcgemm.fuse_siblings(m)
    assert len(report.fused) == 4
    ops = []

    def backend(gm, example_inputs):
        ops.append(sum(1 for node in gm.graph.nodes if "tcgemm" in str(node.target)))
        return gm.forward

    compiled = torch.compile(m, backend=backend)
    with torch.no_grad():
        for seed in range(3):
            ids = torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(seed))
            assert torch.equal(compiled(ids).logits, plain(ids).logits)
        assert ops == [2 * 4]  # qkv, o, gate+up, down per layer; one graph for the three calls (no recompile)
        ids = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(5))
        assert torch.equal(m.generate(ids, max_new_tokens=5, do_sample=False),
                           plain.generate(ids, max_new_tokens=5, do_sample=False))


def test_what_cannot_be_stacked_is_reported_with_the_reason():
    m = model()
    tcgemm.quantize_model(m, skip=("0.k_proj",))
    block = quantized("w8a8-block")  # 128x128 blocks: k's 64 rows end inside a block
    m.append(block[0])
    static = model()
    with tcgemm.calibrate(static) as calibration, torch.no_grad():
        static(x_of())
    tcgemm.quantize_model(static, activation="static", calibration=calibration)
    static[0].k_proj.input_scale.mul_(2)
    m.append(static[0])
    mixed = model()
    tcgemm.quantize_model(mixed, skip=("1.up_proj",))
    tcgemm.quantize_model(mixed, skip=("1.gate_proj",), scheme="w4a8")
    m.append(mixed[1])
    report = tcgemm.fuse_siblings(m)
    reasons = dict(report.skipped)
    assert "not all tcgemm.QuantLinear (found Linear, QuantLinear)" == reasons["0.{q_proj,k_proj,v_proj}"]
    assert "128x128 weight blocks" in reasons["3.{q_proj,k_proj,v_proj}"]
    assert "different 'input_scale'" in reasons["4.{q_proj,k_proj,v_proj}"]
    assert reasons["5.{gate_proj,up_proj}"].startswith("different schemes")
    assert report.fused == ["1.{gate_proj,up_proj}", "2.{q_proj,k_proj,v_proj}"]
    assert "skipped 4" in str(report)
    with pytest.raises(ValueError, match="groups of two or more distinct names"):
        tcgemm.fuse_siblings(m, siblings=[("q_proj", "q_proj")])


def test_a_fused_model_moves_copies_and_saves_its_layers_apart(tmp_path):
    pytest.importorskip("compressed_tensors")
    from tcgemm.compressed import load_compressed, save_compressed

    m = quantized("w4a8")
    tcgemm.fuse_siblings(m)
    x = x_of()
    want = m(x)
    twin = copy.deepcopy(m)
    assert twin[0].q_proj.siblings is twin[0].fused_q_proj_k_proj_v_proj  # the copy's slices read the copy
    assert torch.equal(twin(x), want)
    m.to(torch.float64).to(torch.float32)  # buffers keep their dtypes (QuantLinear._apply)
    assert torch.equal(m(x), want)
    stacked = m[0].fused_q_proj_k_proj_v_proj
    weight = stacked.layer.weight
    save_compressed(m, str(tmp_path / "fused"))
    # The model is as it was: the same stacked layer and buffers, the same slices.
    assert m[0].fused_q_proj_k_proj_v_proj is stacked and stacked.layer.weight is weight
    assert m[0].q_proj.siblings is stacked and torch.equal(m(x), want)
    save_compressed(quantized("w4a8"), str(tmp_path / "apart"))
    # The same checkpoint as the model never fused, tensor for tensor.
    from safetensors.torch import load_file

    fused, apart = load_file(str(tmp_path / "fused" / "model.safetensors")), \
        load_file(str(tmp_path / "apart" / "model.safetensors"))
    assert fused.keys() == apart.keys() and "0.k_proj.weight_packed" in fused
    assert all(torch.equal(fused[key], apart[key]) for key in apart)
    loaded = model()
    load_compressed(loaded, str(tmp_path / "fused"))
    assert torch.equal(loaded(x), quantized_loaded(tmp_path / "apart")(x))


def quantized_loaded(path):
    from tcgemm.compressed import load_compressed

    loaded = model()
    load_compressed(loaded, str(path))
    return loaded


@pytest.mark.gpu
@pytest.mark.parametrize("scheme", ["w8a8", "w4a8", "w4a8-group"])
@pytest.mark.parametrize("rows", [1, 16, 64, 300])
def test_fused_model_on_the_gpu(scheme, rows):
    from cases import assert_replays_in_a_cuda_graph

    m = quantized(scheme, device="cuda")
    x = x_of(rows, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        want = m(x.float()).float()
        tcgemm.fuse_siblings(m)
        got = m(x.float()).float()
        # Other widths may take other kernels, whose fp32 sums of promoted K blocks run in another order.
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
        assert_replays_in_a_cuda_graph(lambda: m(x), m(x))


def test_tensor_parallelism_refuses_a_fused_model():
    pytest.importorskip("torch.distributed.tensor.parallel")
    m = quantized("w8a8")
    tcgemm.fuse_siblings(m)
    with pytest.raises(ValueError, match="unfuse_siblings"):
        tcgemm.parallel.parallelize_module(m, None, {})

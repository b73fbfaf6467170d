"""A Llama-shaped transformers model through quantize_model on the CPU: every projection of the
decoder layers becomes a QuantLinear, the forward and a greedy decode with the KV cache run, and
the logits stay close to the float model's (transformers is an optional import)."""

import pytest
import torch

import tcgemm

transformers = pytest.importorskip("transformers")


def tiny_llama(seed=0):
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).eval()


def sqnr_db(ref, out):
    ref, out = ref.double(), out.double()
    return float(10 * torch.log10(ref.pow(2).sum() / (ref - out).pow(2).sum()))


@pytest.mark.parametrize("recipe", [{}, {"weight": "block", "activation": "block"}, {"smooth": 0.5}],
                         ids=["channel-token", "block-block", "smoothquant"])
def test_tiny_llama_quantizes_and_decodes(recipe):
    model = tiny_llama()
    ids = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids).logits
    quantized = tiny_llama()
    calibration = None
    if "smooth" in recipe:
        with tcgemm.calibrate(quantized) as calibration, torch.no_grad():
            quantized(torch.randint(0, 512, (4, 32), generator=torch.Generator().manual_seed(2)))
    report = tcgemm.quantize_model(quantized, skip=("lm_head",), calibration=calibration, **recipe)
    assert len(report.swapped) == 2 * 7  # q, k, v, o, gate, up, down per layer
    assert report.skipped == [("lm_head", "matches skip entry 'lm_head'")]
    with torch.no_grad():
        out = quantized(ids).logits
        db = sqnr_db(ref, out)
        print(f"tiny Llama {recipe}: logits SQNR {db:.1f} dB")
        assert db > 28
        generated = quantized.generate(ids[:1, :8], max_new_tokens=6, do_sample=False)
    assert generated.shape == (1, 14)


@pytest.mark.parametrize("scheme", ["w4a8", "w4a8-group"])
def test_4bit_projection_bytes_per_parameter(scheme):
    """What bench_llm reports as the projections' bytes per parameter: the packed weight and every
    scale, at most 0.57 at Llama-3 8B's shapes."""
    from benchmarks.bench_llm import projection_bytes_per_param
    from tcgemm.fuse import FusedSlice

    def layer_bytes(n, k):
        groups = -(-k // 128)
        scales = 4 * n + n * groups if scheme == "w4a8" else 4 * n * groups
        return n * k // 2 + scales

    model = tiny_llama()
    tcgemm.quantize_model(model, skip=("lm_head",), scheme=scheme)
    layers = [m for m in model.modules() if isinstance(m, tcgemm.QuantLinear)]
    assert len(layers) == 2 * 7
    expected = (sum(layer_bytes(m.out_features, m.in_features) for m in layers)
                / sum(m.out_features * m.in_features for m in layers))
    assert projection_bytes_per_param(model) == pytest.approx(expected)
    # Fused siblings: the stacked layers' bytes and weights, each once (the slices only view them).
    tcgemm.fuse_siblings(model)
    assert any(isinstance(m, FusedSlice) for m in model.modules())
    assert projection_bytes_per_param(model) == pytest.approx(expected)
    llama_8b = torch.nn.ModuleDict({
        name: tcgemm.QuantLinear(k, n, bias=False, scheme=scheme, device="meta")
        for name, k, n in (("qkv", 4096, 6144), ("o", 4096, 4096), ("gate_up", 4096, 28672), ("down", 14336, 4096))
    })
    assert projection_bytes_per_param(llama_8b) <= 0.57

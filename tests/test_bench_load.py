"""benchmarks.bench_load on the CPU with a tiny Llama: the bf16 checkpoint and the W4A8
compressed-tensors one written in several shards, each measurement step run (load from the meta
device, quantize on load through transformers, generate() of both models), the loaded models
equal bit for bit to the model quantized in memory, and the table rendered from the figures."""

import os

import pytest
import torch

pytest.importorskip("compressed_tensors")
transformers = pytest.importorskip("transformers")

import tcgemm  # noqa: E402
import tcgemm.compressed  # noqa: E402
import tcgemm.hf  # noqa: E402
from benchmarks import bench_load  # noqa: E402


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("bench_load"))
    return bench_load.make_checkpoints(workdir, 2, bench_load.TINY, torch.device("cpu"), "1MB")


def _quantized_in_memory(bf16_dir):
    model = transformers.AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.bfloat16).eval()
    tcgemm.quantize_model(model, scheme=bench_load.SCHEME, skip=["lm_head"])
    return model


def test_checkpoints_are_sharded_and_load_at_their_size(checkpoints):
    ck = checkpoints
    assert ck["bf16_files"] > 1 and ck["w4a8_files"] > 1
    assert os.path.exists(os.path.join(ck["w4a8_dir"], "model.safetensors.index.json"))
    assert ck["w4a8_bytes"] < 0.6 * ck["bf16_bytes"]  # 4-bit projections, bf16 embeddings and lm_head
    load = bench_load.measure_load(ck["w4a8_dir"], torch.device("cpu"))
    # the same tensors (the rotary tables, rebuilt on load, may take one storage more)
    assert load["seconds"] > 0 and load["model_bytes"] == pytest.approx(ck["quantized_model_bytes"], abs=1024)
    assert "cuda_peak_bytes" not in load  # CUDA figures only on a GPU
    if load["host_peak_bytes"] is not None:  # Linux: the resident set's high-water mark
        assert load["host_peak_bytes"] >= 0


def test_both_loads_equal_the_model_quantized_in_memory(checkpoints):
    """Quantize on load: the state of quantize_model after a bf16 load, bit for bit. The W4A8
    checkpoint: its float group scales are the products of the two-level scales rounded once to
    fp32, factored back on load: the dequantized weights within that rounding, the logits close."""
    ck = checkpoints
    expected = _quantized_in_memory(ck["bf16_dir"])
    qol = bench_load.measure_quantize_on_load(ck["bf16_dir"], torch.device("cpu"), ck["quantized_model_bytes"])
    assert qol["model_bytes"] == pytest.approx(ck["quantized_model_bytes"], abs=1024)
    on_load = transformers.AutoModelForCausalLM.from_pretrained(
        ck["bf16_dir"], quantization_config=tcgemm.hf.TcgemmConfig(bench_load.SCHEME), dtype=torch.bfloat16)
    state = on_load.state_dict()
    assert sorted(state) == sorted(expected.state_dict())
    for key, value in expected.state_dict().items():
        assert torch.equal(state[key], value), key
    loaded = tcgemm.compressed.from_pretrained(ck["w4a8_dir"], device="cpu", dtype=torch.bfloat16)
    layers = {n: m for n, m in expected.named_modules() if isinstance(m, tcgemm.QuantLinear)}
    assert len(layers) == 2 * 7
    for name, layer in layers.items():
        got, want = loaded.get_submodule(name).dequantize_weight(), layer.dequantize_weight()
        assert torch.allclose(got, want, rtol=2**-22, atol=0), (name, float((got - want).abs().max()))
    ids = torch.randint(0, bench_load.TINY["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = expected(ids).logits.float(), loaded(ids).logits.float()
    assert torch.allclose(got, want, rtol=1e-2, atol=1e-2 * float(want.abs().max())), float((got - want).abs().max())


def test_generate_runs_both_models_and_the_table_renders(checkpoints):
    ck = checkpoints
    gen = bench_load.measure_generate(ck["bf16_dir"], ck["w4a8_dir"], torch.device("cpu"), 4, compile_forward=False,
                                      profile=True)
    for model in ("bf16", "w4a8", "one_layer"):  # a third run's profile: wall and device time per token, top events
        prof = gen[model]["profile"]
        assert prof["wall_ms_per_token"] > 0 and prof["device_ms_per_token"] > 0
        assert prof["top"] and all(e["count"] > 0 and e["us"] >= 0 for e in prof["top"])
    assert gen["bf16"]["new_tokens"] == 4 and gen["w4a8"]["new_tokens"] == 4 and gen["one_layer"]["new_tokens"] == 4
    assert gen["speedup"] == pytest.approx(gen["w4a8"]["tokens_per_s"] / gen["bf16"]["tokens_per_s"])
    load = {"seconds": 1.5, "model_bytes": 5.4e9, "host_peak_bytes": 2.1e9, "cuda_peak_bytes": 5.6e9,
            "cuda_peak_over_model": 5.6 / 5.4}
    qol = {"seconds": 30.0, "model_bytes": 5.4e9, "host_peak_bytes": 3e9, "cuda_peak_bytes": 6.4e9,
           "cuda_peak_above_quantized_bytes": 1e9}
    doc = {"meta": {"device": "NVIDIA H200", "torch": torch.__version__, "date": "2026-11-29T12:00:00"},
           "layers": 32, "shard": "5GB", "checkpoints": ck, "load": load, "quantize_on_load": qol, "generate": gen}
    body = bench_load.markdown(doc, "python3 -m benchmarks.bench_load")["bench_load"]
    assert "Measured 2026-11-29 12:00 UTC on NVIDIA H200" in body
    assert "| load: peak CUDA memory | 5.60 GB, 1.037x the loaded model | <= 1.15x |" in body
    assert "| load: peak host memory above the start | 2.10 GB | <= 6 GB |" in body
    assert "1.00 GB above the quantized model" in body
    assert f"({gen['speedup']:.2f}x) | >= 1.8x |" in body
    assert f"one decoder layer (the floor per token) | {gen['one_layer']['tokens_per_s']:.1f} tok/s" in body


def test_a_step_runs_in_a_process_of_its_own(checkpoints):
    """What the run does per measurement: the step in a fresh process, its figures as JSON."""
    import argparse

    args = argparse.Namespace(device="cpu", new_tokens=2, compile="off", profile=False)
    load = bench_load._subprocess("load", checkpoints, args)
    assert load["model_bytes"] == pytest.approx(checkpoints["quantized_model_bytes"], abs=1024)
    assert load["seconds"] > 0

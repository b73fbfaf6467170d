"""The benchmarks' tables from result files (CPU): a variant or method that fails is shown as failed
with its error listed under the table, not as figures, and the working ones keep their ratios
(compiled variants to bf16 compiled); --variants picks variants by name, bench_decode's --layers
layers and --methods methods. torch's int4 peer (bench_decode.TorchInt4Linear) computes the
quantized layer it stands for (CPU kernel; the CUDA packing's shapes under fake tensors, its
values where a GPU is present), and its bytes per parameter count the packed weight and scales."""

import json

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from benchmarks import bench_decode, bench_llm


def decode(batch, ms, mode="graph"):
    return {"batch": batch, "mode": mode, "ms_per_step": ms, "tokens_per_s": batch / ms * 1e3}


def doc():
    meta = {"device": "NVIDIA H200", "torch": torch.__version__, "date": "2026-11-23T20:32:00"}
    ok = [decode(b, ms) for b, ms in zip(bench_llm.BATCHES, (8.0, 12.0, 24.0))]
    return {"meta": meta, "layers": 32, "context": 512, "prefill_tokens": 2048, "results": [
        {"variant": "bf16", "weights_gib": 15.0, "prefill_ms": 60.0, "decode": ok, "peak_gib": 19.6},
        {"variant": "tcgemm channel", "weights_gib": 8.5, "prefill_ms": 40.0,
         "decode": [decode(1, 4.0, "eager")] + [{"batch": b, "error": "RuntimeError: capture broke"}
                                               for b in bench_llm.BATCHES[1:]], "peak_gib": 13.1},
        {"variant": "torchao int8 dynamic", "weights_gib": 8.5, "error": "ImportError: no kernel", "peak_gib": 9.0},
    ]}


def test_llm_table_marks_failed_runs_and_lists_their_errors():
    body = bench_llm.markdown(doc(), "python3 -m benchmarks.bench_llm")["bench_llm"]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in body.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows["bf16"][:3] == ["60.0", "1.00x", "125 (1.00x)"]
    assert rows["tcgemm channel"][:5] == ["40.0", "1.50x", "250 (2.00x) (eager)", "error", "error"]
    assert rows["torchao int8 dynamic"][:2] == ["error", "-"]
    assert "- tcgemm channel, decode at batch 8: RuntimeError: capture broke" in body
    assert "- torchao int8 dynamic: ImportError: no kernel" in body
    assert "torchao: `Int8DynamicActivationInt8WeightConfig`" in body  # the legend says how torchao ran


def test_bench_llm_variant_selection():
    select_variants = bench_llm.select_variants
    known = {"bf16": None, "tcgemm channel": len, "torchao int8 dynamic + compile": abs}
    assert select_variants(known, None) is known
    assert list(select_variants(known, "torchao int8 dynamic + compile, bf16")) == [
        "bf16", "torchao int8 dynamic + compile"]
    with pytest.raises(ValueError, match="--variants.*'tcgemm'"):
        select_variants(known, "bf16,tcgemm")
    with pytest.raises(ValueError, match="--variants"):
        select_variants(known, " , ")


def test_llm_kernel_summary():
    """One step's kernels: their time in all, the span with the gaps, the names that took most."""
    kernels = [("gemm_a", 0.0, 10.0), ("norm", 12.0, 13.0), ("gemm_a", 15.0, 25.0), ("x" * 150, 30.0, 31.5)]
    got = bench_llm.kernel_summary(kernels, top=2)
    assert got["kernels"] == 4 and got["kernel_us"] == 22.5 and got["span_us"] == 31.5
    assert got["top"] == [{"name": "gemm_a", "count": 2, "us": 20.0}, {"name": "x" * 100, "count": 1, "us": 1.5}]
    assert bench_llm.kernel_summary([]) == {"kernels": 0, "kernel_us": 0.0, "span_us": 0.0, "top": []}


def test_bench_decode_layer_selection():
    select_layers = bench_decode.select_layers
    assert select_layers(None, False) == bench_decode.LAYERS
    assert [name for name, _, _ in select_layers(None, True)] == ["8B qkv", "8B o", "8B down"]
    assert select_layers("70B_o, 8B gate+up", False) == [("70B o", 8192, 8192), ("8B gate+up", 4096, 28672)]
    assert select_layers("8B_kv,8B_up", False) == bench_decode.SPLIT_LAYERS  # named only
    with pytest.raises(ValueError, match="--layers.*'8B_gate'"):
        select_layers("8B_qkv,8B_gate", False)


@pytest.mark.parametrize("argv, message", [(["--layers", "8B_gate"], "unknown layer '8B_gate'"),
                                           (["--rows", "0", "4"], "--rows: row counts must be at least 1")])
def test_bench_decode_refuses_a_bad_selection_before_running(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench_decode.main(argv)
    assert message in capsys.readouterr().err


def test_llm_table_of_compiled_4bit_variants():
    ok = [decode(1, 10.0)]
    results = [
        {"variant": "bf16", "compiled": False, "weights_gib": 15.0, "proj_bytes_per_param": 2.0, "decode": ok,
         "peak_gib": 19.6},
        {"variant": "bf16", "compiled": True, "weights_gib": 15.0, "proj_bytes_per_param": 2.0,
         "decode": [decode(1, 8.0)], "peak_gib": 19.7},
        {"variant": "tcgemm-w4a8", "compiled": True, "weights_gib": 4.6, "proj_bytes_per_param": 0.50879,
         "decode": [decode(1, 3.2)], "peak_gib": 6.0},
        {"variant": "torch-int4", "compiled": True, "weights_gib": 4.9, "proj_bytes_per_param": 0.53125,
         "decode": [decode(1, 4.0, "eager")], "peak_gib": 6.3},
        {"variant": "tcgemm-w4a8-group", "compiled": True, "error": "RuntimeError: no kernel"},
    ]
    doc = {"meta": {"device": "NVIDIA H100", "date": "2026-11-25T10:00:00"}, "layers": 32, "context": 512,
           "prefill_tokens": 0, "batches": [1], "results": results}
    body = bench_llm.markdown(doc)["bench_llm"]
    lines = [line for line in body.splitlines() if line.startswith("| ")]
    assert [c.strip() for c in lines[0].split("|")[1:-1]] == [
        "variant", "decode tok/s, batch 1", "proj. bytes/param", "weights GiB", "peak GiB"]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in lines[1:]}
    assert rows["bf16"] == ["100 (1.00x)", "2.000", "15.0", "19.6"]
    assert rows["bf16, compiled"] == ["125 (1.00x)", "2.000", "15.0", "19.7"]
    assert rows["tcgemm-w4a8, compiled"] == ["312 (2.50x)", "0.509", "4.6", "6.0"]
    assert rows["torch-int4, compiled"][:2] == ["250 (2.00x) (eager)", "0.531"]
    assert rows["tcgemm-w4a8-group, compiled"] == ["error", "-", "-", "-"]
    assert "- tcgemm-w4a8-group, compiled: RuntimeError: no kernel" in body
    assert "Prefill" not in body and "ratios to bf16 compiled" in body
    assert "tcgemm-w4a8: `quantize_model(scheme=\"w4a8\")`" in body
    assert "torch-int4: `torch.ops.aten._weight_int4pack_mm`" in body


def decode_record(layer, m, graph, errors=None, rel_err=None):
    name, k, n = next(entry for entry in bench_decode.LAYERS if entry[0] == layer)
    return {"layer": name, "k": k, "n": n, "m": m, "weight_bytes": n * k,
            "bytes": {"w4a8": n * k // 2 + 4 * n + n * k // 128}, "graph": graph, "eager": graph,
            "errors": errors or {}, "rel_err": rel_err or {}}


def decode_doc(records):
    return {"meta": {"device": "NVIDIA H100", "date": "2026-11-25T10:00:00"}, "decode": records, "prefill": [],
            "static": [], "host_us": {"nn.Linear": 15.0, "QuantLinear": 15.5}}


def table_rows(table):
    return {(cells[0], cells[2]): cells for cells in ([c.strip() for c in line.split("|")[1:-1]]
                                                      for line in table.splitlines() if line.startswith("| "))}


def test_decode_table_of_4bit_methods_with_a_missing_peer():
    records = [
        decode_record("8B o", 1, {"bf16": 13.5, "quantlinear": 8.4, "w4a8": 6.0, "torch_int4": 7.5},
                      rel_err={"quantlinear": 0.004, "w4a8": 0.07, "torch_int4": 0.07}),
        decode_record("8B o", 16, {"bf16": 13.5, "quantlinear": 9.9, "w4a8": 9.0},
                      errors={"torch_int4": "RuntimeError: _weight_int4pack_mm: no CUDA kernel"}),
        decode_record("8B down", 1, {"bf16": 32.0, "quantlinear": 18.5, "w4a8": 10.0, "torch_int4": 11.0},
                      rel_err={"w4a8": 0.98}),
    ]
    body = bench_decode.markdown(decode_doc(records))["bench_decode"]
    four = body[body.index("| layer | K->N | M | bf16 us | W8A8 us | W4A8 us"):]
    rows = table_rows(four.split("\n\n")[0])
    assert rows[("8B o", "1")][3:] == ["13.5", "8.4", "6.0", "7.5", "1.61x", "2.25x", "1.40x", "1.80x", "1.25x",
                                        f"{(4096 * 4096 // 2 + 4 * 4096 + 4096 * 32) / 6e-6 / 1e12:.2f}"]
    assert rows[("8B o", "16")][6] == "error" and rows[("8B o", "16")][10:12] == ["-", "-"]
    assert rows[("8B down", "1")][11] == "1.10x"
    assert "gemlite" not in body  # gemlite did not run: no columns of it
    assert "- torch int4 (8B o M=16): RuntimeError: _weight_int4pack_mm: no CUDA kernel" in body
    assert "- W4A8 (8B down M=1: 0.98): output off bf16's by more than" in body
    assert "W4A8 (8B o" not in body  # within tolerance: no note
    assert body.count("| layer |") == 2  # no prefill records: no prefill table


def test_decode_table_of_a_result_without_4bit_methods():
    record = decode_record("8B qkv", 1, {"bf16": 16.7, "quantlinear": 12.1, "two_ops": 13.9,
                                         "quantlinear_block": 12.9})
    for key in ("bytes", "errors", "rel_err"):  # results written before these keys
        del record[key]
    doc = decode_doc([record])
    doc["prefill"] = [dict(record, m=2048, layer="8B down", k=14336, n=4096)]
    body = bench_decode.markdown(doc)["bench_decode"]
    assert "W4A8" not in body and "Not measured" not in body and body.count("| layer |") == 2
    assert table_rows(body)[("8B qkv", "1")][3:6] == ["16.7", "12.1", "1.38x"]


def test_bench_decode_method_selection():
    assert bench_decode.select_methods(None) == bench_decode.METHODS
    assert bench_decode.select_methods("torch_int4, bf16,w4a8") == ("bf16", "w4a8", "torch_int4")
    with pytest.raises(ValueError, match="--methods.*'int4'"):
        bench_decode.select_methods("bf16,int4")


def dequantize_int4(q, scales_and_zeros, group_size=bench_decode.INT4_GROUP_SIZE):
    scale, zero = scales_and_zeros.double().transpose(0, 1).unbind(-1)  # [N, K / group_size] each
    n, k = q.shape
    return ((q.double() - 8).reshape(n, k // group_size, group_size) * scale[..., None]
            + zero[..., None]).reshape(n, k)


def test_int4_peer_computes_its_quantized_layer_on_the_cpu():
    torch.manual_seed(0)
    lin = torch.nn.Linear(384, 80, bias=True, dtype=torch.bfloat16)
    layer = bench_decode.TorchInt4Linear.from_linear(lin)
    q, scales_and_zeros = bench_decode.int4_weight_only(lin.weight)
    assert q.min() >= 0 and q.max() <= 15 and scales_and_zeros.shape == (3, 80, 2)
    w = dequantize_int4(q, scales_and_zeros)
    assert (w - lin.weight.double()).norm() / lin.weight.double().norm() < 0.15
    x = torch.randn(2, 5, 384, dtype=torch.bfloat16)
    ref = x.double() @ w.T + lin.bias.double()
    assert ref.abs().amax() > 0
    out = layer(x)
    assert out.shape == (2, 5, 80) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2 * ref.abs().amax().item())
    assert bench_decode.layer_bytes(layer) == 80 * 384 // 2 + 3 * 80 * 2 * 2  # packed weight, scales and zeros


def test_int4_peer_packs_for_cuda_as_tinygemm_reads():
    with FakeTensorMode():
        lin = torch.nn.Linear(4096, 1024, bias=False, device="cuda", dtype=torch.bfloat16)
        layer = bench_decode.TorchInt4Linear.from_linear(lin)
        out = layer(torch.empty(1, 1, 4096, device="cuda", dtype=torch.bfloat16))
    inner = bench_decode.INT4_INNER_K_TILES
    assert layer.weight.dtype == torch.int32 and layer.weight.shape == (1024 // 8, 4096 // (inner * 16), 32, inner // 2)
    assert layer.scales_and_zeros.shape == (4096 // 128, 1024, 2) and layer.scales_and_zeros.dtype == torch.bfloat16
    assert out.shape == (1, 1, 1024) and out.dtype == torch.bfloat16
    assert bench_decode.layer_bytes(layer) / (4096 * 1024) == 0.5 + 4 / 128


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_int4_peer_computes_its_quantized_layer_on_the_gpu():
    torch.manual_seed(0)
    lin = torch.nn.Linear(1024, 256, bias=False, device="cuda", dtype=torch.bfloat16)
    layer = bench_decode.TorchInt4Linear.from_linear(lin)
    w = dequantize_int4(*bench_decode.int4_weight_only(lin.weight))
    x = torch.randn(3, 1024, device="cuda", dtype=torch.bfloat16)
    ref = x.double() @ w.T
    assert ref.abs().amax() > 0
    torch.testing.assert_close(layer(x).double(), ref, rtol=2e-2, atol=2e-2 * ref.abs().amax().item())


def test_projection_bytes_per_param_leaves_out_the_lm_head_and_biases():
    model = torch.nn.ModuleDict({
        "q_proj": torch.nn.Linear(256, 128, bias=True, dtype=torch.bfloat16),
        "down_proj": bench_decode.TorchInt4Linear.from_linear(torch.nn.Linear(256, 64, bias=False)),
        "lm_head": torch.nn.Linear(256, 1000, bias=False, dtype=torch.bfloat16),
    })
    expected = (2 * 256 * 128 + 64 * 256 // 2 + 2 * 64 * 2 * 2) / (256 * 128 + 256 * 64)
    assert bench_llm.projection_bytes_per_param(model) == pytest.approx(expected)
    assert bench_llm.projection_bytes_per_param(torch.nn.ModuleDict({"lm_head": model["lm_head"]})) is None


def test_swap_linears_keeps_the_lm_head():
    model = torch.nn.ModuleDict({"layers": torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU()),
                                 "lm_head": torch.nn.Linear(128, 32)})
    bench_llm.swap_linears(model, bench_decode.TorchInt4Linear.from_linear)
    assert isinstance(model["layers"][0], bench_decode.TorchInt4Linear)
    assert type(model["lm_head"]) is torch.nn.Linear


def test_decode_table_with_gemlite_peers():
    records = [decode_record("8B gate+up", 1, {"bf16": 56.0, "quantlinear": 33.0, "w4a8": 18.0, "torch_int4": 22.0,
                                                "gemlite_a8w8": 30.0, "gemlite_a16w4": 36.0}),
               decode_record("8B gate+up", 64, {"bf16": 60.0, "quantlinear": 38.0, "w4a8": 40.0},
                             errors={"gemlite_a16w4": "ImportError: No module named 'gemlite'"})]
    body = bench_decode.markdown(decode_doc(records))["bench_decode"]
    four = body[body.index("| layer | K->N | M | bf16 us | W8A8 us | W4A8 us"):]
    header = four.splitlines()[0]
    assert "gemlite A8W8 us | gemlite A16W4 us" in header and "W8A8 x gemlite A8W8 | W4A8 x gemlite A16W4" in header
    rows = table_rows(four.split("\n\n")[0])
    assert rows[("8B gate+up", "1")][7:9] == ["30.0", "36.0"]
    assert rows[("8B gate+up", "1")][14:16] == ["0.91x", "2.00x"]  # 30 / 33 and 36 / 18
    assert rows[("8B gate+up", "64")][8] == "error" and rows[("8B gate+up", "64")][11] == "0.95x"
    assert "- gemlite A16W4 (8B gate+up M=64): ImportError" in body


def rows_doc():
    """A --decode-only sweep: graph timings alone, at two row counts of two layers."""
    graphs = {("8B o", 1): {"bf16": 13.5, "quantlinear": 7.5, "w4a8": 5.4, "torch_int4": 6.9},
              ("8B o", 64): {"bf16": 12.0, "quantlinear": 12.5, "w4a8": 12.0},
              ("70B down", 1): {"bf16": 110.0, "quantlinear": 66.0, "w4a8": 33.0, "torch_int4": 64.0}}
    records = [dict(decode_record(layer, m, g), eager={}) for (layer, m), g in graphs.items()]
    records[1]["errors"] = {"torch_int4": "RuntimeError: no kernel"}
    doc = decode_doc(records)
    doc["meta"]["command"] = "python3 -m benchmarks.bench_decode --decode-only --rows 1 64"
    return doc


def test_decode_rows_sweep_writes_its_own_section():
    """A --decode-only run with 4-bit methods fills "bench_decode rows" (the 4-bit table, its notes),
    not the "bench_decode" section of the fuller run."""
    sections = bench_decode.markdown(rows_doc())
    assert list(sections) == ["bench_decode rows"]
    body = sections["bench_decode rows"]
    assert body.startswith("## Rows per step: W4A8, W8A8 and the peers")
    assert "`python3 -m benchmarks.bench_decode --decode-only --rows 1 64`" in body
    assert "graph QuantLinear us" not in body and body.count("| layer |") == 1
    rows = table_rows(body)
    assert rows[("8B o", "64")][3:6] == ["12.0", "12.5", "12.0"] and rows[("8B o", "64")][6] == "error"
    assert "- torch int4 (8B o M=64): RuntimeError: no kernel" in body


def test_readme_table_of_a_rows_sweep(tmp_path):
    """The README's table: W4A8 / W8A8 over bf16 per layer and row count, "-" where a method did not
    run; --render --readme replaces only its marked block."""
    doc = rows_doc()
    del doc["decode"][1]["graph"]["w4a8"]
    table = bench_decode.readme_table(doc)
    assert "(NVIDIA H100, 2026-11-25 10:00 UTC" in table and "--decode-only --rows 1 64`" in table
    lines = [[c.strip() for c in line.split("|")[1:-1]] for line in table.splitlines() if line.startswith("| ")]
    assert lines[0] == ["layer (K->N)", "bf16 us, 1 row", "1 row", "64 rows"]
    assert lines[1] == ["8B o (4096->4096)", "13.5", "2.50 / 1.80", "- / 0.96"]
    assert lines[2] == ["70B down (28672->8192)", "110.0", "3.33 / 1.67", "- / -"]
    result, readme = tmp_path / "rows.json", tmp_path / "README.md"
    result.write_text(json.dumps(doc))
    readme.write_text("# Title\n\nbefore\n\n<!-- begin: bench_decode readme -->\nold\n"
                      "<!-- end: bench_decode readme -->\n\nafter\n")
    assert bench_decode.main(["--render", str(result), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n<!-- begin: bench_decode readme -->\nSpeed-up over bf16")
    assert "old" not in text and text.endswith("<!-- end: bench_decode readme -->\n\nafter\n")
    assert "| 8B o (4096->4096) | 13.5 | 2.50 / 1.80 | - / 0.96 |" in text

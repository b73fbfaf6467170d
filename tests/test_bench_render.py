"""The end-to-end benchmark's table from a result file (CPU): a variant whose steps fail is shown as
failed with its error listed under the table, not as figures, and the working variants keep
their ratios to bf16; --variants picks variants by name, and bench_decode's --layers layers."""

import pytest
import torch

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


def test_bench_decode_layer_selection():
    select_layers = bench_decode.select_layers
    assert select_layers(None, False) == bench_decode.LAYERS
    assert [name for name, _, _ in select_layers(None, True)] == ["8B qkv", "8B o", "8B down"]
    assert select_layers("70B_o, 8B gate+up", False) == [("70B o", 8192, 8192), ("8B gate+up", 4096, 28672)]
    with pytest.raises(ValueError, match="--layers.*'8B_up'"):
        select_layers("8B_qkv,8B_up", False)


@pytest.mark.parametrize("argv, message", [(["--layers", "8B_up"], "unknown layer '8B_up'"),
                                           (["--rows", "0", "4"], "--rows: row counts must be at least 1")])
def test_bench_decode_refuses_a_bad_selection_before_running(argv, message, capsys):
    with pytest.raises(SystemExit):
        bench_decode.main(argv)
    assert message in capsys.readouterr().err

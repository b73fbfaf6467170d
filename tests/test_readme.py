"""The README's Python blocks run as written: the quickstart in one namespace, then the tensor
parallel block in a world of one process over gloo (on the GPU machine the quickstart runs on
the GPU; the tensor-parallel block always runs on the CPU here)."""

import os
import pathlib
import re

import pytest
import torch

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    assert README.is_file(), f"{README} is missing (CI copies it beside the tests)"
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_readme_has_the_blocks_and_the_set_up_commands():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines"
    head = "\n".join(lines[:40])
    assert "pip install -v --no-build-isolation -e . && python3 -m examples.demo" in head
    assert "python3 -m pytest -q tests" in head
    assert len(python_blocks()) == 2


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    for module in ("safetensors", "compressed_tensors"):  # the quickstart saves a checkpoint
        pytest.importorskip(module)
    quickstart, parallel = python_blocks()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(quickstart, "README.md (quickstart)", "exec"), namespace)
    assert namespace["c"].dtype == torch.int32 and namespace["c"].shape == (64, 512)
    expected = namespace["a"].cpu().long() @ namespace["b"].cpu().long()
    assert torch.equal(namespace["c"].cpu().long(), expected)
    loaded = namespace["loaded"]
    assert all(type(loaded[i]).__name__ == "QuantLinear" for i in (0, 2))
    for i in (0, 2):  # the checkpoint holds the weights that were saved (as float group scales)
        torch.testing.assert_close(loaded[i].dequantize_weight(), namespace["model"][i].dequantize_weight(),
                                   rtol=1e-6, atol=0)
    x = torch.randn(4, 1024)

    # The tensor-parallel block, in a world of one CPU process.
    import torch.distributed as dist

    loaded.cpu().float()
    namespace["device"] = "cpu"
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000), "RANK": "0",
                       "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    try:
        # gloo, which the README block's init_device_mesh then uses: left to itself on a machine with
        # a GPU it would start nccl alone, which has no backend for CPU tensors.
        dist.init_process_group("gloo")
        exec(compile(parallel, "README.md (tensor parallel)", "exec"), namespace)
        assert loaded[0].tensor_parallel.style == "colwise" and loaded[2].tensor_parallel.style == "rowwise"
        with torch.no_grad():
            y = loaded(x)
        assert y.shape == (4, 1024) and bool(y.isfinite().all())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

"""The extension binds to torch only through its stable ABI (docs/design/binding.md): no ATen, c10
or torch C++ API in csrc/, and a built library whose symbols from torch are the C shim's only, so
one build loads under every torch release setup.py names."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import torch

import tcgemm

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN = re.compile(r'#\s*include\s*[<"](ATen/|c10/|torch/extension\.h|torch/all\.h|torch/library\.h)')


def test_csrc_includes_no_torch_cpp_api():
    csrc = ROOT / "csrc"
    if not csrc.is_dir():
        pytest.skip("run from a checkout (the sources are not installed)")
    files = [p for p in csrc.rglob("*") if p.suffix in {".h", ".cuh", ".cpp", ".cu", ".inc"}]
    assert len(files) > 50, f"only {len(files)} sources found under {csrc}"
    offending = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files for m in FORBIDDEN.finditer(p.read_text())]
    assert not offending, "\n".join(offending)


def test_library_needs_only_the_c_shim_from_torch():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm (binutils)")
    library = pathlib.Path(tcgemm._C.__file__)
    out = subprocess.run([nm, "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True)
    names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    shim = [n for n in names if n.startswith(("aoti_torch_", "torch_"))]
    # C++ symbols of torch: mangled names in the c10, at, torch or caffe2 namespaces.
    cpp = [n for n in names if re.match(r"_ZN?K?(3c10|2at|5torch|6caffe2)", n)]
    assert shim, "no C shim symbol: the ops cannot be registered"
    assert not cpp, f"symbols of torch's C++ API: {cpp[:10]}"
    assert library.name.endswith(".abi3.so"), f"{library.name}: not built for the limited Python API"


def test_errors_name_their_kind_only_for_the_last_message():
    # What the Python API reads back to give a failed check its type (tcgemm._C.error_kind).
    with pytest.raises(RuntimeError) as raw:
        torch.ops.tcgemm.gemm.default(torch.ones(2, 3, dtype=torch.int8), torch.ones(4, 5, dtype=torch.int8))
    assert tcgemm._C.error_kind(str(raw.value)) == 1  # ValueError
    assert tcgemm._C.error_kind(str(raw.value) + " ") == 0
    with pytest.raises(RuntimeError) as raw:
        torch.ops.tcgemm.gemm.default(torch.ones(2, 3), torch.ones(3, 5, dtype=torch.int8))
    assert tcgemm._C.error_kind(str(raw.value)) == 2  # TypeError


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not pathlib.Path("/proc/self/statm").exists(), reason="reads /proc/self/statm (Linux)")
def test_calls_keep_no_memory():
    # Every argument's handle torch makes for a call is released: a string argument converted by
    # torch 2.11's stable headers left a heap copy behind on each call (48 bytes of heap; 9.6 MB
    # over these calls), a tensor handle kept would be more.
    a, b = torch.zeros(1, 0, dtype=torch.int8), torch.zeros(0, 4, dtype=torch.int8)
    bias = torch.zeros(4)
    op = torch.ops.tcgemm.gemm.default
    scaled = torch.ops.tcgemm.scaled_gemm.default
    scale = torch.ones(1)
    for _ in range(2000):  # the allocator's pools warm
        op(a, b, None, 1, 0, "auto")
        scaled(a, b, scale, scale, bias, torch.float32, "auto", None, None)
    before = _resident_bytes()
    for _ in range(100_000):
        assert op(a, b, None, 1, 0, "auto").shape == (1, 4)
        scaled(a, b, scale, scale, bias, torch.float32, "auto", None, None)
    grown = _resident_bytes() - before
    assert grown < 2_000_000, f"resident memory grew {grown / 1e6:.1f} MB over 100000 calls of each op"

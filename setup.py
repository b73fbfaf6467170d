"""Builds tcgemm._C, the CUDA/C++ extension behind torch.ops.tcgemm.

Architectures: TORCH_CUDA_ARCH_LIST when set (e.g. "9.0a" on an H200), otherwise sm_75, sm_80 and
sm_90a machine code plus compute_80 PTX, which newer GPUs compile at load time.
"""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCH_FLAGS = [
    "-gencode=arch=compute_75,code=sm_75",
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90a,code=sm_90a",
    "-gencode=arch=compute_80,code=compute_80",
]


def cuda_arch_flags():
    # torch.utils.cpp_extension turns TORCH_CUDA_ARCH_LIST into -gencode flags, and adds none of
    # its own when the nvcc flags already name an architecture.
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return []
    return DEFAULT_ARCH_FLAGS


def builds_sm90a():
    """Whether the sm90 (wgmma) kernels get sm_90a machine code. Without it their bodies compile
    empty, so the extension is told (TCGEMM_NO_SM90A) and never offers the sm90 backend."""
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if not archs:
        return any("sm_90a" in flag for flag in DEFAULT_ARCH_FLAGS)
    return any(a.split("+")[0] == "9.0a" for a in archs.replace(";", " ").split())


def sources():
    files = glob.glob("csrc/**/*.cpp", recursive=True) + glob.glob("csrc/**/*.cu", recursive=True)
    return sorted(os.path.relpath(f, ROOT) if os.path.isabs(f) else f for f in files)


arch_flags = cuda_arch_flags()
common = ["-O3"]  # the C++ standard is torch's own choice (C++17 for 2.11, C++20 later)
if not builds_sm90a():
    common.append("-DTCGEMM_NO_SM90A")
ext = CUDAExtension(
    name="tcgemm._C",
    sources=sources(),
    include_dirs=[os.path.join(ROOT, "csrc")],
    extra_compile_args={
        "cxx": common,
        "nvcc": common + ["--expt-relaxed-constexpr", "-lineinfo", "-Xptxas=-warn-spills"] + arch_flags,
    },
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExtension})

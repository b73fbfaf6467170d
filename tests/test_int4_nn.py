"""4-bit weights (W4A8) in the Python layers: packing, round-to-nearest, GPTQ, calibration of second
moments and the 4-bit QuantLinear (CPU always, CUDA when present).

- ``pack_int4`` is the inverse of the reference unpacking; bad input names the argument.
- Round-to-nearest on the "amax" grid follows the rule written out here independently (two-level
  and float groups); the default "mse" grid keeps the format and has no larger squared error per
  channel (two-level) or group (float), weighted by a column importance when given.
- GPTQ keeps the scales of round-to-nearest and lowers the layer's output error on correlated
  inputs; it agrees with a plain float64 GPTQ written here (no blocks, no lazy updates).
- A 4-bit QuantLinear computes what the int8 layer on its unpacked weight computes, bit for bit;
  its state goes through state_dict, safetensors, pickling and torch.compile.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import pickle

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm._scales import expand_weight_scale
from tcgemm.int4 import check_group_scale
from tcgemm.nn import GPTQ, Calibration, QuantLinear, calibrate, quantize_model, quantize_weight
from tcgemm.reference import int4_gemm_reference, int4_weight_reference, unpack_int4_reference

W4 = {"two-level": tcgemm.W4A8, "group": tcgemm.W4A8_GROUP}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def gaussian_linear(k, n, seed=0, device="cpu", bias=True) -> nn.Linear:
    g = _gen(seed)
    lin = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) / math.sqrt(k))
        if bias:
            lin.bias.copy_(torch.randn(n, generator=g) * 0.1)
    return lin.to(device)


def uneven_weight(n, k, seed=0) -> torch.Tensor:
    """Gaussian rows whose 1x128 groups differ in magnitude by up to 100x (two-level scales matter)."""
    g = _gen(seed)
    w = torch.randn(n, k, generator=g)
    groups = (k + 127) // 128
    mag = torch.exp(torch.rand(n, groups, generator=g) * math.log(100.0))
    return w * mag.repeat_interleave(128, dim=1)[:, :k] * 0.01


def correlated_inputs(m, k, seed=0) -> torch.Tensor:
    """Inputs with correlated channels and a few large ones, as a layer inside a network sees."""
    g = _gen(seed)
    mix = torch.eye(k) + 2 * torch.randn(k, k, generator=g) / math.sqrt(k)
    x = torch.randn(m, k, generator=g) @ mix
    x[:, : max(1, k // 64)] *= 5
    return x


def sqnr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    ref, out = ref.double().cpu(), out.double().cpu()
    return float(10 * torch.log10(ref.pow(2).sum() / (ref - out).pow(2).sum()))


def output_error(x: torch.Tensor, w: torch.Tensor, wq: torch.Tensor) -> float:
    """||X W^T - X Wq^T|| / ||X W^T||, in float64."""
    x, w, wq = x.double(), w.double().cpu(), wq.double().cpu()
    return float((x @ (w - wq).t()).norm() / (x @ w.t()).norm())


def int8_twin(layer: QuantLinear) -> QuantLinear:
    """The int8 layer on the int8 weight a 4-bit layer's GEMM multiplies (``q * group_scale``):
    two-level weights are per-channel int8, float group scales 1x128 group int8."""
    scheme = layer.scheme
    twin_scheme = dataclasses.replace(scheme, weights=tcgemm.WeightArgs(scheme.weight))
    twin = QuantLinear(layer.in_features, layer.out_features, bias=layer.bias is not None,
                       device=layer.weight.device, scheme=twin_scheme)
    with torch.no_grad():
        twin.weight.copy_(layer.int_weight())
        for name in ("weight_scale", "bias", "input_scale", "smooth", "input_zero_point"):
            if getattr(layer, name) is not None:
                getattr(twin, name).copy_(getattr(layer, name))
    twin.refresh_weight_colsum()
    return twin


# ---------------------------------------------------------------------------- packing


def test_pack_layout_by_hand():
    q = torch.tensor([[1, -2, 7, -8], [0, -1, 3, 4]], dtype=torch.int8)
    packed = tcgemm.pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.tolist() == [[0xE1, 0x87], [0xF0, 0x43]]
    assert torch.equal(unpack_int4_reference(packed), q)
    # On a little-endian machine each int32 word of a row holds value i of its 8 at bits 4i;
    # compressed-tensors stores q + 8 there, byte ^ 0x88 away.
    row = torch.arange(-8, 8, dtype=torch.int8).reshape(1, 16)
    words = tcgemm.pack_int4(row).view(torch.int32)
    for w, values in zip(words[0].tolist(), row[0].reshape(2, 8).tolist()):
        assert [((w >> (4 * i)) & 0xF) ^ 0x8 for i in range(8)] == [v + 8 for v in values]


@pytest.mark.parametrize("n,k", [(1, 2), (7, 130), (33, 256), (5, 1000)], ids=str)
@pytest.mark.parametrize("scaled", [False, True], ids=["q", "q*group_scale"])
def test_pack_unpack_round_trip(n, k, scaled, device):
    g = _gen(n * k)
    q = torch.randint(-8, 8, (n, k), generator=g, dtype=torch.int8)
    gs = torch.randint(1, 17, (n, (k + 127) // 128), generator=g, dtype=torch.int8) if scaled else None
    packed = tcgemm.pack_int4(q.to(device))
    assert packed.device.type == device and tuple(packed.shape) == (n, k // 2)
    expected = q if gs is None else (q.long() * gs.long().repeat_interleave(128, 1)[:, :k]).to(torch.int8)
    assert torch.equal(unpack_int4_reference(packed.cpu(), gs), expected)
    assert torch.equal(tcgemm.unpack_int4(packed, None if gs is None else gs.to(device)).cpu(), expected)
    a = torch.randint(-128, 128, (3, k), generator=g, dtype=torch.int8)
    assert torch.equal(int4_gemm_reference(a, packed, gs), (a.long() @ expected.long().t()).to(torch.int32))


@pytest.mark.parametrize("q,error,match", [
    (torch.zeros(4, 6, dtype=torch.int16), TypeError, "argument 'q' must have dtype torch.int8, got torch.int16"),
    (torch.zeros(4, 6), TypeError, "argument 'q' must have dtype torch.int8"),
    (torch.zeros(6, dtype=torch.int8), ValueError, r"argument 'q' must be a 2-D tensor \[N, K\], got a 1-D tensor"),
    (torch.zeros(2, 4, 6, dtype=torch.int8), ValueError, "argument 'q' must be a 2-D tensor"),
    (torch.zeros(4, 5, dtype=torch.int8), ValueError, r"argument 'q' must have an even number of columns K .*\[4, 5\]"),
    (torch.full((2, 4), 8, dtype=torch.int8), ValueError,
     r"argument 'q' must hold values in \[-8, 7\], got values in \[8, 8\]"),
    (torch.tensor([[0, -9]], dtype=torch.int8), ValueError,
     r"argument 'q' must hold values in \[-8, 7\], got values in \[-9, 0\]"),
    ([[0, 1]], TypeError, "argument 'q' must be a torch.Tensor, got list"),
])
def test_pack_bad_input_names_the_argument(q, error, match):
    with pytest.raises(error, match=f"tcgemm.pack_int4: {match}"):
        tcgemm.pack_int4(q)


@pytest.mark.parametrize("gs,error,match", [
    (torch.ones(4, 3, dtype=torch.uint8), TypeError, "must have dtype torch.int8, got torch.uint8"),
    (torch.ones(4, 2, dtype=torch.int8), ValueError, r"must have shape \[N, ceil\(K/128\)\] = \[4, 3\], got \[4, 2\]"),
    (torch.zeros(4, 3, dtype=torch.int8), ValueError, r"must hold values in \[1, 16\], got values in \[0, 0\]"),
    (torch.full((4, 3), 17, dtype=torch.int8), ValueError, r"must hold values in \[1, 16\], got values in \[17, 17\]"),
    (torch.full((4, 3), -1, dtype=torch.int8), ValueError, r"must hold values in \[1, 16\], got values in \[-1, -1\]"),
])
def test_group_scale_checks_name_the_argument(gs, error, match):
    with pytest.raises(error, match=f"where: argument 'weight_group_scale' {match}"):
        check_group_scale("where", gs, 4, 300)
    check_group_scale("where", torch.randint(1, 17, (4, 3), dtype=torch.int8), 4, 300)


# ---------------------------------------------------------------------------- round to nearest


def two_level_rule(w: torch.Tensor):
    """The two-level rule, written out: per 1x128 group f = amax / 7; c = max_g f / 16 (1 for a
    zero row); s = clamp(round(f / c), 1, 16); q = clamp(round(w / (c * s)), -8, 7)."""
    n, k = w.shape
    groups = (k + 127) // 128
    amax = torch.zeros(n, groups)
    for g in range(groups):
        amax[:, g] = w[:, g * 128:(g + 1) * 128].abs().amax(dim=1)
    f = amax / 7
    c = f.amax(dim=1) / 16
    c = torch.where(c > 0, c, torch.ones_like(c))
    s = torch.round(f / c[:, None]).clamp(1, 16)
    step = (c[:, None] * s).repeat_interleave(128, dim=1)[:, :k]
    return torch.round(w / step).clamp(-8, 7).to(torch.int8), c, s.to(torch.int8), step


def float_group_rule(w: torch.Tensor):
    n, k = w.shape
    groups = (k + 127) // 128
    scale = torch.ones(n, groups)
    for g in range(groups):
        a = w[:, g * 128:(g + 1) * 128].abs().amax(dim=1)
        scale[:, g] = torch.where(a > 0, a / 7, torch.ones_like(a))
    step = scale.repeat_interleave(128, dim=1)[:, :k]
    return torch.round(w / step).clamp(-8, 7).to(torch.int8), scale, step


@pytest.mark.parametrize("n,k", [(64, 384), (33, 130), (8, 2), (130, 1000)], ids=str)
def test_two_level_rtn_is_the_rule(n, k, device):
    w = uneven_weight(n, k, seed=k)
    w[3] = 0  # a zero row: channel scale 1, group scales 1, q = 0
    w[5, :128] = 0  # a zero group in a nonzero row: group scale 1
    packed, scale, group_scale = quantize_weight(w.to(device), "channel", bits=4, grid="amax")
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (n, k // 2)
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (n,)
    assert group_scale.dtype == torch.int8 and tuple(group_scale.shape) == (n, (k + 127) // 128)
    q_rule, c_rule, s_rule, step = two_level_rule(w)
    assert torch.equal(scale.cpu(), c_rule) and torch.equal(group_scale.cpu(), s_rule)
    q = unpack_int4_reference(packed.cpu())
    assert torch.equal(q, q_rule)
    check_group_scale("test", group_scale, n, k)
    # The properties the format promises: q * s fits int8; the largest group of a nonzero row
    # has s = 16; a weight inside the grid's range is off by at most half a step; every group's
    # amax is within its range unless its group scale was rounded down.
    ints = (q.long() * group_scale.cpu().long().repeat_interleave(128, dim=1)[:, :k])
    assert ints.min() >= -128 and ints.max() <= 112
    assert torch.equal(ints.to(torch.int8), tcgemm.unpack_int4(packed.cpu(), group_scale.cpu()))
    nonzero = w.abs().amax(dim=1) > 0
    assert bool((group_scale.cpu()[nonzero].amax(dim=1) == 16).all())
    assert group_scale[3].eq(1).all() and group_scale[5, 0] == 1 and scale[3] == 1 and q[3].eq(0).all()
    err = (w.double() - int4_weight_reference(packed, scale, group_scale)).abs()
    inside = w.abs() <= 7.5 * step
    assert bool((err[inside] <= step[inside].double() / 2 * (1 + 1e-6)).all())
    assert bool((err[~inside] <= (w.abs() - 7 * step)[~inside].double() * (1 + 1e-6)).all())


@pytest.mark.parametrize("n,k", [(64, 384), (33, 130), (130, 1000)], ids=str)
def test_float_group_rtn_is_the_rule(n, k, device):
    w = uneven_weight(n, k, seed=k + 1)
    w[2, 128:256] = 0
    packed, scale, group_scale = quantize_weight(w.to(device), "group", bits=4, grid="amax")
    assert group_scale is None and tuple(scale.shape) == (n, (k + 127) // 128)
    q_rule, s_rule, step = float_group_rule(w)
    assert torch.equal(scale.cpu(), s_rule) and scale[2, 1] == 1
    assert torch.equal(unpack_int4_reference(packed.cpu()), q_rule)
    err = (w.double() - int4_weight_reference(packed, scale)).abs()
    assert bool((err <= step.double() / 2 * (1 + 1e-6)).all())  # amax / 7: nothing is clamped


def test_rtn_of_a_weight_holding_nan_zeroes_its_group():
    w = uneven_weight(4, 256)
    w[1, 5] = float("nan")
    w[2, 200] = float("inf")
    packed, scale, group_scale = quantize_weight(w, "channel", bits=4, grid="amax")
    assert scale[1].isnan() and scale[2].isnan() and scale[[0, 3]].isfinite().all()
    check_group_scale("test", group_scale, 4, 256)  # still valid integers
    q = unpack_int4_reference(packed)
    assert q[1, 5] == 0 and q[2, 200] == 0
    packed, scale, _ = quantize_weight(w, "group", bits=4)
    assert scale[1, 0].isnan() and scale[2, 1].isnan() and scale[1, 1].isfinite()


def group_sq_error(w: torch.Tensor, packed, scale, group_scale=None, importance=None) -> torch.Tensor:
    """float64 [N, ceil(K/128)]: sum over each group of importance * (w - dequantized)^2."""
    n, k = w.shape
    e = (w.double() - int4_weight_reference(packed, scale, group_scale)).pow(2)
    if importance is not None:
        e = e * importance.double()
    groups = (k + 127) // 128
    return nn.functional.pad(e, (0, groups * 128 - k)).view(n, groups, 128).sum(dim=2)


@pytest.mark.parametrize("n,k", [(64, 384), (33, 130), (130, 1000)], ids=str)
@pytest.mark.parametrize("weighted", [False, True], ids=["plain", "importance"])
def test_mse_grid_lowers_the_error(n, k, weighted, device):
    """The "mse" grid (the default): the format's promises hold, and no channel (two-level) or
    group (float) has a larger squared error than on the "amax" grid; in all, clearly lower."""
    w = uneven_weight(n, k, seed=k + 2)
    w[3] = 0
    w[5, :128] = 0
    importance = torch.rand(k, generator=_gen(k)) ** 2 * 10 if weighted else None
    for granularity in ("channel", "group"):
        two_level = granularity == "channel"
        if weighted:
            scale, group_scale, step = tcgemm.int4.int4_grid(w.to(device), two_level, "mse", importance.to(device))
            q = tcgemm.int4.round_to_grid(w.to(device), step, -8, 7)
            mse = (tcgemm.pack_int4(q), scale, group_scale)
        else:
            mse = quantize_weight(w.to(device), granularity, bits=4)
            assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(
                mse, quantize_weight(w.to(device), granularity, bits=4, grid="mse")))
        amax = quantize_weight(w.to(device), granularity, bits=4, grid="amax")
        assert mse[0].shape == amax[0].shape and mse[1].shape == amax[1].shape
        e_mse, e_amax = (group_sq_error(w, *r, importance=importance) for r in (mse, amax))
        if two_level:
            check_group_scale("test", mse[2], n, k)
            q = unpack_int4_reference(mse[0].cpu())
            ints = q.long() * mse[2].cpu().long().repeat_interleave(128, dim=1)[:, :k]
            assert ints.min() >= -128 and ints.max() <= 112
            assert mse[1][3] == 1 and mse[2][3].eq(1).all() and mse[2][5, 0] == 1 and q[3].eq(0).all()
            e_mse, e_amax = e_mse.sum(dim=1), e_amax.sum(dim=1)
        else:
            assert mse[1][5, 0] == 1 and bool((mse[1] <= amax[1]).all())  # clipping ratios <= 1
        assert bool((e_mse <= e_amax * (1 + 1e-5) + 1e-12).all())
        assert float(e_mse.sum()) < 0.9 * float(e_amax.sum())
        print(f"{granularity} {'weighted' if weighted else 'plain'}: squared error mse grid / amax grid "
              f"{float(e_mse.sum() / e_amax.sum()):.3f}")


def test_mse_grid_of_a_weight_holding_nan():
    w = uneven_weight(4, 256)
    w[1, 5] = float("nan")
    w[2, 200] = float("inf")
    packed, scale, group_scale = quantize_weight(w, "channel", bits=4)
    assert scale[1].isnan() and scale[2].isnan() and scale[[0, 3]].isfinite().all()
    check_group_scale("test", group_scale, 4, 256)
    q = unpack_int4_reference(packed)
    assert q[1, 5] == 0 and q[2, 200] == 0
    packed, scale, _ = quantize_weight(w, "group", bits=4)
    assert scale[1, 0].isnan() and scale[2, 1].isnan() and scale[1, 1].isfinite() and scale[0].isfinite().all()


def test_quantize_weight_bad_arguments():
    w = torch.randn(8, 256)
    with pytest.raises(ValueError, match=r"argument 'grid' must be one of 'mse', 'amax' with bits=4 .*got 'max'"):
        quantize_weight(w, "channel", bits=4, grid="max")
    with pytest.raises(ValueError, match=r"argument 'grid' must be one of .* got 'mse' with bits=8"):
        quantize_weight(w, "channel", grid="mse")
    with pytest.raises(ValueError, match=r"int4_grid: argument 'grid' must be one of 'mse', 'amax', got 'x'"):
        tcgemm.int4.int4_grid(w, True, "x")
    with pytest.raises(ValueError, match="quantize_weight: 4-bit weights need granularity 'channel'"):
        quantize_weight(w, "block", bits=4)
    with pytest.raises(ValueError, match=r"argument 'bits' must be one of 4, 8, got 3"):
        quantize_weight(w, "channel", bits=3)
    with pytest.raises(ValueError, match=r"w must have an even number of columns K for 4-bit weights .*\[8, 255\]"):
        quantize_weight(torch.randn(8, 255), "channel", bits=4)
    with pytest.raises(ValueError, match="gptq= and hessian= go together"):
        quantize_weight(w, "channel", bits=4, gptq=GPTQ())
    with pytest.raises(ValueError, match="gptq= and hessian= go together"):
        quantize_weight(w, "channel", hessian=torch.eye(256))
    with pytest.raises(ValueError, match=r"argument 'hessian' must have shape \[K, K\] = \[256, 256\]"):
        quantize_weight(w, "channel", bits=4, hessian=torch.eye(255), gptq=GPTQ())
    with pytest.raises(TypeError, match="argument 'gptq' must be a tcgemm.GPTQ, got dict"):
        quantize_weight(w, "channel", bits=4, hessian=torch.eye(256), gptq={})
    with pytest.raises(ValueError, match="argument 'hessian' holds NaN or inf"):
        quantize_weight(w, "channel", bits=4, hessian=torch.full((256, 256), float("nan")), gptq=GPTQ())
    with pytest.raises(ValueError, match="GPTQ needs a finite weight"):
        quantize_weight(w.index_fill(1, torch.tensor([3]), float("inf")), "channel", hessian=torch.eye(256),
                        gptq=GPTQ())
    with pytest.raises(ValueError, match=r"the damped Hessian is not positive definite \(GPTQ damp=0\)"):
        quantize_weight(w, "channel", bits=4, hessian=-torch.eye(256), gptq=GPTQ(damp=0))
    with pytest.raises(ValueError, match="argument 'damp' must be a finite number >= 0"):
        GPTQ(damp=-0.1)
    with pytest.raises(ValueError, match="argument 'block_size' must be an int >= 1"):
        GPTQ(block_size=0)
    with pytest.raises(TypeError, match="argument 'act_order' must be a bool"):
        GPTQ(act_order=1)


# ---------------------------------------------------------------------------- GPTQ


def plain_gptq(w: torch.Tensor, h: torch.Tensor, step: torch.Tensor, lo: int, hi: int, damp: float) -> torch.Tensor:
    """GPTQ one column at a time in float64 with the inverse Hessian of the remaining columns
    updated explicitly (Optimal Brain Quantization's form): no Cholesky, no blocks."""
    w, h, step = w.double().clone(), h.double().clone(), step.double()
    k = w.shape[1]
    h += damp * h.diagonal().mean() * torch.eye(k, dtype=torch.float64)
    hinv = torch.linalg.inv(h)
    q = torch.zeros_like(w)
    for i in range(k):
        q[:, i] = torch.round(w[:, i] / step[:, i]).clamp(lo, hi)
        err = (w[:, i] - q[:, i] * step[:, i]) / hinv[i, i]
        w[:, i:] -= err[:, None] * hinv[i, i:][None, :]
        hinv -= hinv[:, i:i + 1] @ hinv[i:i + 1, :] / hinv[i, i]
    return q.to(torch.int8)


@pytest.mark.parametrize("bits,granularity", [(4, "channel"), (4, "group"), (8, "channel"), (8, "block")])
def test_gptq_is_the_algorithm(bits, granularity):
    n, k = 24, 200
    w = uneven_weight(n, k, seed=3)
    x = correlated_inputs(400, k, seed=4)
    h = x.t() @ x
    grid = {"grid": "amax"} if bits == 4 else {}
    got = quantize_weight(w, granularity, bits=bits, hessian=h,
                          gptq=GPTQ(damp=0.01, act_order=False, block_size=64, rtn_fallback=False), **grid)
    rtn = quantize_weight(w, granularity, bits=bits, **grid)
    if bits == 4:
        step = two_level_rule(w)[3] if granularity == "channel" else float_group_rule(w)[2]
        q = unpack_int4_reference(got[0])
    else:
        step = expand_weight_scale(rtn[1], n, k, granularity)
        q = got[0]
    expected = plain_gptq(w, h, step, -8 if bits == 4 else -127, 7 if bits == 4 else 127, 0.01)
    # fp32 against float64: a value on a rounding boundary may go either way.
    assert (q == expected).float().mean() >= 0.995


@pytest.mark.parametrize("bits,granularity", [(4, "channel"), (4, "group"), (8, "channel"), (8, "group"),
                                              (8, "block")])
@pytest.mark.parametrize("act_order", [False, True], ids=["in-order", "act-order"])
def test_gptq_lowers_the_output_error(bits, granularity, act_order, device):
    n, k = 96, 384
    w = uneven_weight(n, k, seed=5)
    x = correlated_inputs(1024, k, seed=6)
    h = (x.t() @ x).to(device)
    rtn = quantize_weight(w.to(device), granularity, bits=bits)
    got = quantize_weight(w.to(device), granularity, bits=bits, hessian=(h, x.shape[0]),
                          gptq=GPTQ(act_order=act_order))
    # Only the integers differ: the scales are those of round-to-nearest.
    assert len(got) == len(rtn) and got[0].dtype == rtn[0].dtype and got[0].shape == rtn[0].shape
    for a, b in zip(got[1:], rtn[1:]):
        assert (a is None and b is None) or torch.equal(a, b)
    if bits == 4:
        w_rtn, w_gptq = (int4_weight_reference(*r) for r in (rtn, got))
    else:
        w_rtn, w_gptq = (r[0].double().cpu() * expand_weight_scale(r[1].cpu().double(), n, k, granularity)
                         for r in (rtn, got))
    e_rtn, e_gptq = output_error(x, w, w_rtn), output_error(x, w, w_gptq)
    print(f"{bits}-bit {granularity} act_order={act_order}: output error RTN {e_rtn:.4f}, GPTQ {e_gptq:.4f}")
    assert e_gptq < 0.75 * e_rtn


def test_gptq_options():
    n, k = 64, 256
    w = uneven_weight(n, k, seed=7)
    x = correlated_inputs(512, k, seed=8)
    x[:, 10] = 0  # a dead input: its weights quantize to 0
    h = x.t() @ x
    base = quantize_weight(w, "channel", bits=4, hessian=h, gptq=GPTQ(act_order=False))
    assert unpack_int4_reference(base[0])[:, 10].eq(0).all()
    # Blocks change where the error is carried in bulk, not the result (up to fp32 rounding).
    small = quantize_weight(w, "channel", bits=4, hessian=h, gptq=GPTQ(act_order=False, block_size=16))
    assert (unpack_int4_reference(small[0]) == unpack_int4_reference(base[0])).float().mean() > 0.99
    ordered = quantize_weight(w, "channel", bits=4, hessian=h, gptq=GPTQ(act_order=True))
    assert not torch.equal(ordered[0], base[0])
    assert output_error(x, w, int4_weight_reference(*ordered)) < output_error(x, w, int4_weight_reference(
        *quantize_weight(w, "channel", bits=4)))
    # The Hessian as a (sum, rows) pair is its mean; any positive multiple gives the same result.
    assert torch.equal(quantize_weight(w, "channel", bits=4, hessian=(h, 512), gptq=GPTQ())[0],
                       quantize_weight(w, "channel", bits=4, hessian=h / 512, gptq=GPTQ())[0])
    # More damping moves GPTQ toward round-to-nearest.
    damped = quantize_weight(w, "channel", bits=4, hessian=h, gptq=GPTQ(damp=1e6))
    rtn = quantize_weight(w, "channel", bits=4)
    assert (unpack_int4_reference(damped[0]) == unpack_int4_reference(rtn[0])).float().mean() > 0.99


# ---------------------------------------------------------------------------- calibration


def test_calibrate_second_moments():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    batches = [torch.randn(4, 3, 16, generator=_gen(i)) for i in range(3)]
    with calibrate(model, second_moments=True) as calib, torch.no_grad():
        for b in batches:
            model(b)
        model(torch.randn(0, 16))
    x = torch.cat([b.reshape(-1, 16) for b in batches])
    total, rows = calib.hessians["0"]
    assert rows == 36 and total.dtype == torch.float32 and tuple(total.shape) == (16, 16)
    torch.testing.assert_close(total, x.t() @ x)
    hidden = torch.relu(model[0](x))
    torch.testing.assert_close(calib.hessians["2"][0], hidden.t() @ hidden)
    assert torch.equal(calib["0"], x.abs().amax(dim=0))  # the amax as before
    with calibrate(model) as plain, torch.no_grad():
        model(batches[0])
    assert isinstance(plain, Calibration) and plain.hessians == {} and set(plain) == {"0", "2"}
    assert not model[0]._forward_pre_hooks and not model[2]._forward_pre_hooks
    with pytest.raises(TypeError, match="argument 'second_moments' must be a bool"):
        with calibrate(model, second_moments="yes"):
            pass


# ---------------------------------------------------------------------------- QuantLinear


@pytest.mark.parametrize("kind", list(W4))
def test_4bit_layer_buffers(kind, device):
    layer = QuantLinear(300, 130, scheme=W4[kind], device=device)
    assert layer.bits == 4 and layer.scheme.bits == 4
    assert layer.weight.dtype == torch.uint8 and tuple(layer.weight.shape) == (130, 150)
    assert layer.weight_scale.dtype == torch.float32
    if kind == "two-level":
        assert tuple(layer.weight_scale.shape) == (130,)
        assert layer.weight_group_scale.dtype == torch.int8 and tuple(layer.weight_group_scale.shape) == (130, 3)
    else:
        assert tuple(layer.weight_scale.shape) == (130, 3) and layer.weight_group_scale is None
    assert "bits=4" in repr(layer) and "bits" not in repr(QuantLinear(300, 130))
    assert QuantLinear(300, 130).weight_group_scale is None
    with pytest.raises(ValueError, match="QuantLinear: in_features must be even for 4-bit weights .* got 301"):
        QuantLinear(301, 130, scheme=W4[kind])
    half = copy.deepcopy(layer).half()  # scales stay fp32, integers untouched
    assert half.weight_scale.dtype == torch.float32 and half.weight.dtype == torch.uint8
    assert kind == "group" or half.weight_group_scale.dtype == torch.int8


@pytest.mark.parametrize("kind", list(W4))
@pytest.mark.parametrize("activation", ["token", "block", "static"])
def test_4bit_layer_is_the_int8_layer_of_its_unpacked_weight(kind, activation, device):
    lin = gaussian_linear(300, 130, seed=1, device=device)
    x = correlated_inputs(7, 300, seed=2).to(device)
    scheme = dataclasses.replace(W4[kind], activations=tcgemm.QuantScheme.from_keywords(
        activation=activation).activations)
    layer = QuantLinear.from_linear(lin, scheme=scheme, input_amax=x.abs().amax(0))
    twin = int8_twin(layer)
    torch.testing.assert_close(layer.dequantize_weight(), twin.dequantize_weight(), rtol=1e-6, atol=0)
    torch.testing.assert_close(layer.dequantize_weight().double().cpu(),
                               int4_weight_reference(layer.weight, layer.weight_scale, layer.weight_group_scale))
    with torch.no_grad():
        y, y8, ref = layer(x), twin(x), lin(x)
    assert y.abs().sum() > 0 and torch.equal(y, y8)
    assert sqnr_db(ref, y) > 15  # 4-bit weights: about 6 dB a bit below W8A8


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_4bit_two_level_asymmetric_and_smooth(static, device):
    lin = gaussian_linear(256, 96, seed=3, device=device)
    x = (correlated_inputs(9, 256, seed=4).abs() + 0.5).to(device)  # not centred on 0
    activation = "static" if static else "token"
    scheme = tcgemm.QuantScheme(tcgemm.WeightArgs("channel", bits=4), tcgemm.QuantScheme.from_keywords(
        activation=activation, asymmetric=True).activations, smooth=0.5)
    layer = QuantLinear.from_linear(lin, scheme=scheme, input_amax=x.abs().amax(0), input_range=(x.amin(0), x.amax(0)))
    assert layer.weight_colsum is not None and layer.smooth is not None
    assert torch.equal(layer.weight_colsum, layer.int_weight().sum(1, dtype=torch.int32))
    with torch.no_grad():
        assert torch.equal(layer(x), int8_twin(layer)(x))


def test_4bit_group_asymmetric_is_refused():
    with pytest.raises(ValueError, match="asymmetric activations need weight='channel'"):
        QuantLinear(256, 96, scheme=dataclasses.replace(
            tcgemm.W4A8_GROUP, activations=tcgemm.ActivationArgs("token", symmetric=False)))


@pytest.mark.parametrize("kind", list(W4))
def test_4bit_state_dict_round_trip(kind, device):
    st = pytest.importorskip("safetensors.torch")
    layer = QuantLinear.from_linear(gaussian_linear(300, 130, seed=5, device=device), scheme=W4[kind])
    state = layer.state_dict()
    assert state["weight"].dtype == torch.uint8
    assert ("weight_group_scale" in state) == (kind == "two-level")
    x = correlated_inputs(5, 300, seed=6).to(device)
    with torch.no_grad():
        expected = layer(x)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = [torch.load(buffer, weights_only=True), st.load(st.save({k: v.cpu() for k, v in state.items()}))]
    for sd in loaded:
        fresh = QuantLinear(300, 130, scheme=W4[kind], device=device)
        fresh.load_state_dict(sd)
        with torch.no_grad():
            assert torch.equal(fresh(x), expected)
    for copied in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        with torch.no_grad():
            assert torch.equal(copied(x), expected)


def test_4bit_load_state_dict_checks_the_format():
    layer = QuantLinear.from_linear(gaussian_linear(300, 130), scheme=tcgemm.W4A8)
    state = layer.state_dict()
    fresh = QuantLinear(300, 130, scheme=tcgemm.W4A8)
    for value, error, match in [
        (0, ValueError, r"'weight_group_scale' must hold values in \[1, 16\], got values in \[0, 16\]"),
        (17, ValueError, r"'weight_group_scale' must hold values in \[1, 16\], got values in \[1, 17\]"),
    ]:
        bad = dict(state, weight_group_scale=state["weight_group_scale"].clone())
        bad["weight_group_scale"][4, 1] = value
        bad["weight_group_scale"][5, 0] = 16 if value == 0 else 1
        with pytest.raises(error, match=f"QuantLinear.load_state_dict: {match}"):
            fresh.load_state_dict(bad)
    with pytest.raises(TypeError, match="'weight_group_scale' must have dtype torch.int8, got torch.float32"):
        fresh.load_state_dict(dict(state, weight_group_scale=state["weight_group_scale"].float()))
    with pytest.raises(TypeError, match=r"'weight' must have dtype torch.uint8 \(packed 4-bit\), got torch.int8"):
        fresh.load_state_dict(dict(state, weight=state["weight"].view(torch.int8)))
    with pytest.raises(ValueError, match=r"'weight' must have shape \[N, K/2\] = \[130, 150\], got \[130, 300\]"):
        fresh.load_state_dict(dict(state, weight=torch.zeros(130, 300, dtype=torch.uint8)))
    nested = nn.Sequential(fresh)
    with pytest.raises(ValueError, match=r"'0.weight_group_scale' must hold values in \[1, 16\]"):
        nested.load_state_dict({f"0.{k}": v for k, v in dict(
            state, weight_group_scale=torch.zeros_like(state["weight_group_scale"])).items()})
    assert fresh.weight_group_scale.eq(1).all()  # nothing was loaded


@pytest.mark.parametrize("kind", list(W4))
def test_4bit_backward_through_the_dequantized_weight(kind):
    layer = QuantLinear.from_linear(gaussian_linear(256, 64, seed=7), scheme=W4[kind])
    layer.bias.requires_grad_(True)
    x = correlated_inputs(5, 256, seed=8).requires_grad_(True)
    y = layer(x)
    g = torch.randn(y.shape, generator=_gen(9))
    y.backward(g)
    torch.testing.assert_close(x.grad, g @ layer.dequantize_weight())
    torch.testing.assert_close(layer.bias.grad, g.sum(0))
    with torch.no_grad():
        assert torch.equal(y.detach(), layer(x))


@pytest.mark.parametrize("kind", list(W4))
def test_4bit_compile_fullgraph_traces_cpu(kind):
    dims = (256, 384, 128)
    layers = []
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        layers += [QuantLinear.from_linear(gaussian_linear(a, b, seed=i), scheme=W4[kind]), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    torch._dynamo.reset()  # QuantLinear.forward's compiled variants of other tests count toward the recompile limit
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        for m in (8, 3):
            x = correlated_inputs(2 * m, 256, seed=m).reshape(2, m, 256)
            assert torch.equal(compiled(x), model(x))
    torch._dynamo.reset()


@pytest.mark.parametrize("kind", list(W4))
def test_4bit_quant_linear_opcheck(kind):
    layer = QuantLinear.from_linear(gaussian_linear(256, 64, seed=10), scheme=W4[kind])
    x = correlated_inputs(3, 256, seed=11)
    kwargs = {} if layer.weight_group_scale is None else {"weight_group_scale": layer.weight_group_scale}
    torch.library.opcheck(torch.ops.tcgemm.quant_linear.default,
                          (x, layer.weight, layer.weight_scale, layer.bias, "token"), kwargs)


# ---------------------------------------------------------------------------- from_linear and quantize_model with GPTQ


@pytest.mark.parametrize("kind", list(W4))
def test_from_linear_with_gptq(kind, device):
    lin = gaussian_linear(384, 96, seed=12, device=device)
    x = correlated_inputs(1024, 384, seed=13)
    h = x.t() @ x
    rtn = QuantLinear.from_linear(lin, scheme=W4[kind])
    layer = QuantLinear.from_linear(lin, scheme=W4[kind], gptq=GPTQ(), hessian=h.to(device))
    packed, scale, group_scale = quantize_weight(lin.weight, W4[kind].weight, bits=4, hessian=h, gptq=GPTQ())
    assert torch.equal(layer.weight, packed) and torch.equal(layer.weight_scale, scale)
    assert group_scale is None or torch.equal(layer.weight_group_scale, group_scale)
    w = lin.weight.detach().cpu()
    e_rtn = output_error(x, w, rtn.dequantize_weight().cpu())
    assert output_error(x, w, layer.dequantize_weight().cpu()) < 0.75 * e_rtn
    with pytest.raises(ValueError, match="QuantLinear.from_linear: gptq= and hessian= go together"):
        QuantLinear.from_linear(lin, scheme=W4[kind], gptq=GPTQ())
    with pytest.raises(ValueError, match=r"argument 'hessian' must have shape \[K, K\] = \[384, 384\]"):
        QuantLinear.from_linear(lin, scheme=W4[kind], gptq=GPTQ(), hessian=torch.eye(96))


def test_smoothquant_and_gptq_compose():
    """GPTQ of a smoothed layer sees the smoothed weight W * s and the second moments of the
    smoothed input x / s: diag(1/s) H diag(1/s)."""
    lin = gaussian_linear(256, 128, seed=14)
    x = correlated_inputs(1024, 256, seed=15)
    x[:, [3, 70, 200]] *= 30  # outlier channels for SmoothQuant to move
    h = x.t() @ x
    amax = x.abs().amax(0)
    scheme = dataclasses.replace(tcgemm.W4A8, smooth=0.5)
    layer = QuantLinear.from_linear(lin, scheme=scheme, input_amax=amax, gptq=GPTQ(), hessian=h)
    s = tcgemm.nn.smooth_factors(amax, lin.weight, 0.5)
    torch.testing.assert_close(layer.smooth, 1.0 / s)
    xs = x * layer.smooth
    packed, scale, group_scale = quantize_weight(lin.weight.detach() * s, "channel", bits=4, hessian=xs.t() @ xs,
                                                 gptq=GPTQ())
    assert (unpack_int4_reference(layer.weight) == unpack_int4_reference(packed)).float().mean() > 0.99
    assert torch.equal(layer.weight_scale, scale) and torch.equal(layer.weight_group_scale, group_scale)
    rtn = QuantLinear.from_linear(lin, scheme=scheme, input_amax=amax)
    w = lin.weight.detach()
    assert output_error(x, w, layer.dequantize_weight()) < 0.75 * output_error(x, w, rtn.dequantize_weight())
    with torch.no_grad():
        assert sqnr_db(lin(x), layer(x)) > sqnr_db(lin(x), rtn(x)) + 2


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.unused = gaussian_linear(256, 512, 0), gaussian_linear(512, 256, 1), nn.Linear(8, 8)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x)))


@pytest.mark.parametrize("scheme", ["w4a8", "w4a8-group", "w8a8"])
def test_quantize_model_with_gptq(scheme):
    model = TwoLayers()
    calib_x, test_x = correlated_inputs(2048 + 256, 256, seed=16).split([2048, 256])  # one distribution
    with torch.no_grad():
        ref = model(test_x)
    results = {}
    for name, gptq in (("rtn", None), ("gptq", GPTQ(act_order=True))):
        q = copy.deepcopy(model)
        with calibrate(q, second_moments=True) as calib, torch.no_grad():
            q(calib_x)
        report = quantize_model(q, scheme=scheme, calibration=calib, gptq=gptq)
        assert report.swapped[:2] == ["fc1", "fc2"]
        if gptq is not None:
            assert report.skipped == [("unused", "no second moments for GPTQ (it did not run under "
                                                 "calibrate(..., second_moments=True))")]
        with torch.no_grad():
            results[name] = sqnr_db(ref, q(test_x))
    print(f"{scheme}: output SQNR dB {results}")
    # 4-bit weights dominate a W4A8 layer's error, GPTQ's gain is large; W8A8's is mostly the activations'.
    assert results["gptq"] > results["rtn"] + (2.0 if tcgemm.PRESETS[scheme].bits == 4 else 0.3)


def test_quantize_model_gptq_needs_second_moments():
    model = TwoLayers()
    with pytest.raises(ValueError, match=r"quantize_model: gptq needs the second moments of a Calibration"):
        quantize_model(copy.deepcopy(model), scheme="w4a8", gptq=GPTQ())
    with calibrate(model) as amax, torch.no_grad():
        model(torch.randn(4, 256))
    with pytest.raises(ValueError, match=r"second_moments=True"):
        quantize_model(copy.deepcopy(model), scheme="w4a8", calibration=amax, gptq=GPTQ())
    with pytest.raises(TypeError, match="argument 'gptq' must be a tcgemm.GPTQ"):
        quantize_model(copy.deepcopy(model), scheme="w4a8", calibration=amax, gptq=0.01)


def test_quantize_model_skips_odd_in_features_for_4bit():
    model = nn.Sequential(nn.Linear(7, 16), nn.ReLU(), nn.Linear(16, 4))
    report = quantize_model(model, scheme="w4a8")
    assert report.swapped == ["2"]
    assert report.skipped == [("0", "in_features 7 is odd (4-bit weights pack two values a byte)")]
    assert quantize_model(nn.Sequential(nn.Linear(7, 16)), scheme="w8a8").swapped == ["0"]


def test_4bit_exports():
    assert tcgemm.GPTQ is GPTQ is tcgemm.nn.GPTQ
    assert tcgemm.pack_int4 is tcgemm.int4.pack_int4
    assert tcgemm.PRESETS["w4a8"] is tcgemm.W4A8 and tcgemm.PRESETS["w4a8-group"] is tcgemm.W4A8_GROUP
    with pytest.raises(dataclasses.FrozenInstanceError):
        GPTQ().damp = 0.1  # type: ignore[misc]

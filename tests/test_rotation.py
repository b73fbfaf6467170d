"""Rotated layers (``QuantScheme(rotate=True)``, tcgemm.rotation): the block Hadamard matrix is
orthonormal and its own inverse, and ``rotate_blocks`` is it in the kernels' butterfly order;
``tcgemm.quantize(x, rotate=True)`` is the reference quantization of the rotated input, bit for
bit on the CPU and the GPU (every kernel shape of the token and group kernels, every dtype, strided
x, bad data); a rotated QuantLinear is ``tcgemm.quant_linear(..., rotate=True)`` on ``x`` with
the quantized ``W R``, bit for bit ``quant_linear`` on the rotated fp32 input, and within the
quantization's error of the float layer; its
weight rotates back, its state_dict round-trips, its gradient is the rotated-back weight's, GPTQ
sees the rotated second moments, it traces whole under torch.compile and replays in a CUDA graph;
what it cannot run is refused naming the setting. CPU and CUDA.
(Accuracy on a trained model: tests/test_calibration.py.)"""

import dataclasses
import pickle

import pytest
import torch
from torch import nn

import tcgemm
from tcgemm.nn import GPTQ, QuantLinear
from tcgemm.reference import quantize_reference
from tcgemm.rotation import hadamard, rotate_blocks, rotate_hessian

ROTATED = {"w8a8": dataclasses.replace(tcgemm.W8A8_DYNAMIC, rotate=True),
           "w4a8": dataclasses.replace(tcgemm.W4A8, rotate=True),
           "w4a8-group": dataclasses.replace(tcgemm.W4A8_GROUP, rotate=True),
           "w8a8-block": dataclasses.replace(tcgemm.W8A8_BLOCK, rotate=True)}


def _linear(gen, k, n, device):
    lin = nn.Linear(k, n)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=gen) * 0.05)
        lin.weight[:, 3] *= 20.0  # an outlier input feature
        lin.bias.copy_(torch.randn(n, generator=gen))
    return lin.to(device)


def test_hadamard_is_orthonormal_and_its_own_inverse():
    h = hadamard(dtype=torch.float64)
    assert h.shape == (128, 128)
    assert torch.allclose(h @ h, torch.eye(128, dtype=torch.float64), atol=1e-12)
    assert torch.equal(h, h.t())
    x = torch.randn(4, 3, 384, dtype=torch.float64)
    assert torch.allclose(rotate_blocks(rotate_blocks(x)), x, atol=1e-12)
    # block diagonal: the first 128 features do not reach the others
    assert torch.equal(rotate_blocks(torch.cat([x[..., :128], torch.zeros_like(x[..., 128:])], -1))[..., 128:],
                       torch.zeros_like(x[..., 128:]))


def test_rotate_blocks_is_the_hadamard_product():
    x = torch.randn(7, 384, dtype=torch.float64)
    h = hadamard(dtype=torch.float64)
    assert torch.allclose(rotate_blocks(x), (x.reshape(7, 3, 128) @ h).reshape(7, 384), atol=1e-12)
    # fp32: the butterflies' rounding, the same bits on every device
    xf = torch.randn(5, 256)
    assert torch.allclose(rotate_blocks(xf), (xf.reshape(5, 2, 128) @ h.float()).reshape(5, 256), atol=1e-5)
    if torch.cuda.is_available():
        assert torch.equal(rotate_blocks(xf.cuda()).cpu(), rotate_blocks(xf))


# K values that take each shape of the GPU token kernel (bf16: a warp per row up to 1024 values,
# a block up to 16384, a block of 1024 threads up to 32768, two sweeps beyond) and of fp32 (a warp
# up to 1024 values, a block up to 16384, two sweeps beyond).
ROTATE_KS = [128, 384, 1024, 4096, 14336, 16384 + 128, 32768, 32768 + 256]


@pytest.mark.parametrize("granularity", ["token", "group"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("k", ROTATE_KS)
def test_quantize_rotated_is_the_reference(granularity, dtype, k, device):
    gen = torch.Generator().manual_seed(k)
    x = (torch.randn(3, k, generator=gen) * torch.linspace(0.5, 4.0, k)).to(dtype)
    x[1, 5] = 300.0  # an outlier feature: spread over its block
    xd = x.to(device)
    q, s = tcgemm.quantize(xd, granularity, rotate=True)
    q_ref, s_ref = quantize_reference(x, granularity, rotate=True)
    assert torch.equal(q.cpu(), q_ref) and torch.equal(s.cpu(), s_ref)
    # the same as quantizing the rotated values, rotated in fp32 by rotate_blocks
    q2, s2 = tcgemm.quantize(rotate_blocks(xd.float()), granularity)
    assert torch.equal(q, q2) and torch.equal(s, s2)


@pytest.mark.parametrize("granularity", ["token", "group"])
def test_quantize_rotated_layouts_and_bad_data(granularity, device):
    gen = torch.Generator().manual_seed(11)
    base = torch.randn(6, 2 * 512 + 3, generator=gen).to(device=device, dtype=torch.bfloat16)
    for x in (base[:, :512], base[:, 1:513], base[::2, 3:515], base[:, :1024:2], base[0, :512].expand(4, 512),
              base[:4, :256].reshape(2, 2, 256)):
        q, s = tcgemm.quantize(x, granularity, rotate=True)
        q_ref, s_ref = quantize_reference(x, granularity, rotate=True)
        assert torch.equal(q.cpu(), q_ref.cpu()) and torch.equal(s.cpu(), s_ref.cpu())
    # a NaN or an inf in a block: its row (per token) or its group gets the scale NaN and zeros
    x = torch.randn(4, 512, generator=gen).to(device)
    x[1, 7], x[2, 300] = float("nan"), float("inf")
    q, s = tcgemm.quantize(x, granularity, rotate=True)
    q_ref, s_ref = quantize_reference(x, granularity, rotate=True)
    assert torch.equal(q.cpu(), q_ref.cpu()) and torch.allclose(s.cpu(), s_ref.cpu(), rtol=0, atol=0, equal_nan=True)
    assert s[1].isnan().any() and s[2].isnan().any() and not s[0].isnan().any()
    assert (q[1] == 0).all() if granularity == "token" else (q[1, :128] == 0).all()


def test_rotated_ops_opcheck(device):
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(3, 256, generator=gen).to(device=device, dtype=torch.bfloat16)
    for granularity in ("token", "group"):
        torch.library.opcheck(torch.ops.tcgemm.quantize.default, (x, granularity, None, None, True))
    q = QuantLinear.from_linear(_linear(gen, 256, 64, device), scheme=ROTATED["w4a8"])
    torch.library.opcheck(torch.ops.tcgemm.quant_linear.default,
                          (x, q.weight, q.weight_scale, q.bias, "token", None, None, "auto", False, None, None,
                           q.weight_group_scale, True))


def test_quantize_rotated_refused(device):
    x = torch.randn(2, 256, device=device)
    with pytest.raises(ValueError, match="rotate=True needs K a multiple of 128"):
        tcgemm.quantize(torch.randn(2, 200, device=device), rotate=True)
    with pytest.raises(ValueError, match="rotate=True needs dynamic symmetric scales"):
        tcgemm.quantize(x, scale=torch.ones(2, 1, device=device), rotate=True)
    with pytest.raises(ValueError, match="rotate=True needs dynamic symmetric scales"):
        tcgemm.quantize(x, symmetric=False, rotate=True)
    with pytest.raises(ValueError, match="rotate=True needs granularity 'token' or 'group', got 'tensor'"):
        tcgemm.quantize(x, "tensor", rotate=True)
    with pytest.raises(TypeError, match="argument 'rotate' must be a bool"):
        tcgemm.quantize(x, rotate=1)
    # the layer op: the same checks, and its own message for a rotate that is not a bool
    w, sw = torch.ones(8, 256, dtype=torch.int8, device=device), torch.ones(8, device=device)
    with pytest.raises(TypeError, match="tcgemm.quant_linear: argument 'rotate' must be a bool, got int"):
        tcgemm.quant_linear(x, w, sw, rotate=1)
    with pytest.raises(ValueError, match="tcgemm.quant_linear: rotate=True needs dynamic symmetric scales and no "
                                         "'smooth'"):
        tcgemm.quant_linear(x, w, sw, activation="static", input_scale=torch.ones((), device=device), rotate=True)
    with pytest.raises(ValueError, match=r"tcgemm.quant_linear: rotate=True needs K a multiple of 128 \(one Hadamard "
                                         r"block\), got 'x' of shape \[2, 200\]"):
        tcgemm.quant_linear(torch.randn(2, 200, device=device), w[:, :200], sw, rotate=True)
    # the reference refuses what the op refuses
    with pytest.raises(ValueError, match="rotate=True needs dynamic scales per token or group"):
        quantize_reference(x, "tensor", rotate=True)


def test_rotate_hessian_is_that_of_the_rotated_input():
    x = torch.randn(50, 256, dtype=torch.float64)
    xr = rotate_blocks(x)
    assert torch.allclose(rotate_hessian(x.t() @ x), xr.t() @ xr, atol=1e-9)


def test_rotate_blocks_needs_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 128"):
        rotate_blocks(torch.randn(2, 200))


@pytest.mark.parametrize("scheme", list(ROTATED))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rotated_layer_is_quant_linear_on_the_rotated_input(scheme, dtype, device):
    gen = torch.Generator().manual_seed(3)
    lin = _linear(gen, 256, 192, device)
    q = QuantLinear.from_linear(lin, scheme=ROTATED[scheme])
    x = torch.randn(2, 5, 256, generator=gen).to(device=device, dtype=dtype)
    y = q(x)
    assert y.dtype == dtype and y.shape == (2, 5, 192)
    expect = tcgemm.quant_linear(x, q.weight, q.weight_scale, q.bias, q.scheme.activation,
                                 weight_group_scale=q.weight_group_scale, rotate=True)
    assert torch.equal(y, expect)
    # the op on the rotated fp32 input (no rounding to x's dtype between the rotation and the
    # quantization), its fp32 outputs rounded once to x's dtype
    xr = rotate_blocks(x.float()).reshape(10, 256)
    expect = tcgemm.quant_linear(xr, q.weight, q.weight_scale, q.bias, q.scheme.activation,
                                 weight_group_scale=q.weight_group_scale)
    assert torch.equal(y.reshape(10, 192), expect.to(dtype))
    # and the float layer, within the error of the quantization (4 bits: a coarser bound)
    with torch.no_grad():
        ref = lin(x.float())
    err = float((y.float() - ref).norm() / ref.norm())
    assert err < (0.08 if ROTATED[scheme].bits == 4 else 0.02), err


@pytest.mark.gpu
@pytest.mark.parametrize("scheme", ["w8a8", "w4a8"])
@pytest.mark.parametrize("k", [256, 4096, 8192, 14336])
def test_rotated_layer_few_rows_cuda(scheme, k):
    # the quantize kernel's warp and block teams, then the few-rows GEMM with an int8 A
    gen = torch.Generator().manual_seed(k)
    q = QuantLinear.from_linear(_linear(gen, k, 512, "cuda"), scheme=ROTATED[scheme])
    for m in (1, 3):
        x = torch.randn(m, k, generator=gen).to("cuda", torch.bfloat16)
        expect = tcgemm.quant_linear(rotate_blocks(x.float()), q.weight, q.weight_scale, q.bias, q.scheme.activation,
                                     weight_group_scale=q.weight_group_scale)
        with torch.no_grad():
            assert torch.equal(q(x), expect.to(torch.bfloat16))


def test_rotated_weight_rotates_back_and_state_dict_round_trips(device):
    gen = torch.Generator().manual_seed(4)
    lin = _linear(gen, 384, 64, device)
    q = QuantLinear.from_linear(lin, scheme=ROTATED["w4a8"])
    w = q.dequantize_weight()
    # the 4-bit grid's error, against the weight in its own basis
    assert float((w - lin.weight.detach()).norm() / lin.weight.detach().norm()) < 0.15
    assert torch.allclose(rotate_blocks(w), q._op_weight(torch.float32), atol=1e-5)
    fresh = QuantLinear(384, 64, scheme=ROTATED["w4a8"], device=device)
    fresh.load_state_dict(q.state_dict())
    x = torch.randn(3, 384, generator=gen).to(device)
    assert torch.equal(fresh(x), q(x))
    assert "rotate=True" in repr(q) and "rotate" in str(q.scheme)


def test_rotated_layer_gradient(device):
    gen = torch.Generator().manual_seed(5)
    q = QuantLinear.from_linear(_linear(gen, 256, 32, device), scheme=ROTATED["w8a8"])
    x = torch.randn(4, 256, generator=gen).to(device).requires_grad_()
    q(x).sum().backward()
    expect = torch.ones(4, 32, device=device) @ q.dequantize_weight()
    assert torch.allclose(x.grad, expect, atol=1e-4)


def test_rotated_gptq_lowers_the_output_error():
    gen = torch.Generator().manual_seed(6)
    lin = _linear(gen, 256, 128, "cpu")
    x = torch.randn(512, 256, generator=gen) * torch.linspace(0.1, 3.0, 256)
    rtn = QuantLinear.from_linear(lin, scheme=ROTATED["w4a8"])
    gptq = QuantLinear.from_linear(lin, scheme=ROTATED["w4a8"], gptq=GPTQ(), hessian=x.t() @ x)
    ref = x @ lin.weight.detach().t()
    err = {name: float((x @ m.dequantize_weight().t() - ref).norm()) for name, m in [("rtn", rtn), ("gptq", gptq)]}
    assert err["gptq"] < 0.95 * err["rtn"], err
    # GPTQ ran on the rotated weight with the rotated input's second moments
    packed, scale, group = tcgemm.nn.quantize_weight(rotate_blocks(lin.weight.detach()), "channel", bits=4,
                                                     hessian=rotate_hessian(x.t() @ x), gptq=GPTQ())
    assert torch.equal(gptq.weight, packed) and torch.equal(gptq.weight_group_scale, group)


@pytest.mark.parametrize("change, match", [
    ({"smooth": 0.5}, "rotate=True needs dynamic symmetric activations without SmoothQuant"),
    ({"activations": tcgemm.ActivationArgs("tensor", dynamic=False)}, "rotate=True needs dynamic"),
    ({"activations": tcgemm.ActivationArgs("token", symmetric=False)}, "rotate=True needs dynamic"),
])
def test_rotated_schemes_refused(change, match):
    with pytest.raises(ValueError, match=match):
        QuantLinear(256, 64, scheme=dataclasses.replace(ROTATED["w8a8"], **change))


def test_rotated_layer_needs_whole_blocks_and_no_compressed_checkpoint(tmp_path):
    with pytest.raises(ValueError, match="in_features a multiple of 128.*got 200"):
        QuantLinear(200, 64, scheme=ROTATED["w8a8"])
    with pytest.raises(TypeError, match="rotate must be a bool"):
        dataclasses.replace(tcgemm.W4A8, rotate=1)
    with pytest.raises(ValueError, match="rotate=True"):
        ROTATED["w4a8"].to_compressed_tensors()
    pytest.importorskip("safetensors")
    pytest.importorskip("compressed_tensors")
    import tcgemm.compressed as ct

    model = nn.Sequential(QuantLinear.from_linear(nn.Linear(256, 64), scheme=ROTATED["w4a8"]))
    with pytest.raises(ValueError, match="layer '0' rotates its input"):
        ct.save_compressed(model, str(tmp_path / "ckpt"))


def test_rotated_layers_compile_fullgraph_cpu():
    gen = torch.Generator().manual_seed(7)
    model = nn.Sequential(QuantLinear.from_linear(_linear(gen, 256, 384, "cpu"), scheme=ROTATED["w4a8"]), nn.ReLU(),
                          QuantLinear.from_linear(_linear(gen, 384, 128, "cpu"), scheme=ROTATED["w8a8"]))
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        for m in (8, 3):
            x = torch.randn(2, m, 256, generator=gen)
            assert torch.equal(compiled(x), model(x))
    torch._dynamo.reset()


@pytest.mark.gpu
def test_rotated_layer_cuda_graph():
    gen = torch.Generator().manual_seed(8)
    layer = QuantLinear.from_linear(_linear(gen, 512, 256, "cuda"), scheme=ROTATED["w4a8"])
    x = torch.randn(4, 512, generator=gen).to("cuda", torch.bfloat16)
    expect = layer(x)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        layer(x)  # warm-up off the default stream
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        out = layer(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, expect)


def test_rotated_layer_pickles_whole():
    gen = torch.Generator().manual_seed(9)
    layer = QuantLinear.from_linear(_linear(gen, 256, 64, "cpu"), scheme=ROTATED["w8a8"])
    x = torch.randn(3, 256, generator=gen)
    # pickled whole (torch.save of a model): the rotation comes back
    again = pickle.loads(pickle.dumps(layer))
    assert again._rotate and torch.equal(again(x), layer(x))
    # a layer pickled when rotated layers kept the Hadamard matrix as a buffer drops it
    layer._buffers["hadamard"] = hadamard()
    again = pickle.loads(pickle.dumps(layer))
    assert "hadamard" not in again._buffers and torch.equal(again(x), layer(x))

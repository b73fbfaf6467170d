"""Rotated layers (``QuantScheme(rotate=True)``, tcgemm.rotation): the block Hadamard matrix is
orthonormal and its own inverse; a rotated QuantLinear is ``tcgemm.quant_linear`` on ``x R`` with
the quantized ``W R``, bit for bit, and within the quantization's error of the float layer; its
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
    xr = rotate_blocks(x).reshape(10, 256)
    expect = tcgemm.quant_linear(xr, q.weight, q.weight_scale, q.bias, q.scheme.activation,
                                 weight_group_scale=q.weight_group_scale)
    assert torch.equal(y.reshape(10, 192), expect)
    # and the float layer, within the error of the quantization (4 bits: a coarser bound)
    with torch.no_grad():
        ref = lin(x.float())
    err = float((y.float() - ref).norm() / ref.norm())
    assert err < (0.08 if ROTATED[scheme].bits == 4 else 0.02), err


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


def test_rotated_layer_keeps_an_fp32_matrix_of_its_own():
    layer = QuantLinear(256, 64, scheme=ROTATED["w8a8"])
    assert layer.hadamard.dtype == torch.float32 and "hadamard" not in layer.state_dict()
    assert layer.hadamard.data_ptr() != hadamard().data_ptr()
    layer.half()
    assert layer.hadamard.dtype == torch.float32
    assert QuantLinear(256, 64, scheme="w8a8").hadamard is None
    # pickled whole (torch.save of a model): the buffer and the rotation come back
    again = pickle.loads(pickle.dumps(layer))
    x = torch.randn(3, 256)
    assert again._rotate and torch.equal(again.hadamard, layer.hadamard) and torch.equal(again(x), layer(x))

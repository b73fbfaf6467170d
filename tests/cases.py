"""Case lists, readable pytest ids and helpers shared by the test modules (pytest puts tests/ on sys.path)."""

import torch

# The skinny kernel quantizes x itself up to this many 16-byte vectors of x per thread of its 256
# (csrc/kernels/skinny/configs.h, kQuantizeVecs), against int8 and packed 4-bit weights alike.
FUSED_VECTORS_PER_THREAD = 4


# Explicit mantissa bits of the scaled outputs' dtypes: the stated bound's ulp_out.
MANTISSA = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


def ulp(value, dtype, tiny=2.0**-126):
    """ulp_out of the stated bound: the spacing of `dtype` at |value| (float64), |value| taken as
    at least `tiny` (the smallest normal fp32 by default; finfo(dtype).tiny counts subnormal
    outputs of dtype as one rounding of its smallest normal)."""
    mag = value.abs().clamp_min(tiny)
    return torch.exp2(torch.floor(torch.log2(mag)) - MANTISSA[dtype])


def dtype_id(dtype):
    return {torch.int8: "i8", torch.uint8: "u8"}[dtype]


def dtype_pair_id(pair):
    return "x".join(dtype_id(d) for d in pair)


def alpha_beta_id(pair):
    alpha, beta = pair
    return f"alpha{alpha}-beta{beta}"


# alpha/beta pairs whose products with the accumulator or C overflow int32 and must wrap.
ALPHA_BETA_WRAP = [
    (2**30, 0),
    (-(2**31), 1),
    (2**31 - 1, -(2**31)),
    (65537, 65537),
]


def cuda_kernels(fn):
    """The names of the CUDA kernels fn() launches (benchmarks.timing.cuda_kernels), after a
    warm-up call: first-call set-up (descriptor caches, lazy module loads) is not profiled."""
    from benchmarks import timing

    fn()
    return [name for name, _, _ in timing.cuda_kernels(fn)]


def assert_int8_layer_of_less_zero_points(y, x, layer):
    """`y`, the output of an asymmetric 4-bit `layer` for `x`, is that of the int8 layer of its
    q - zero_point with the same fp32 group scales: bit for bit on the CPU (both unpack), and up to
    the order of the fp32 sums of the K blocks on the GPU, where the few-rows kernel reads the
    packed weight and its zero points in place and sums the blocks in another order."""
    import tcgemm  # noqa: PLC0415  (cases.py is imported by tests that do not need the package)

    int8 = tcgemm.quant_linear(x, layer.int_weight(), layer.weight_scale, layer.bias)
    if y.is_cuda:
        torch.testing.assert_close(y, int8, rtol=1e-5, atol=1e-5 * float(int8.abs().max()))
    else:
        assert torch.equal(y, int8)


def assert_replays_in_a_cuda_graph(fn, want):
    """fn() captured in a CUDA graph (warmed up off the default stream, as torch.cuda.graphs
    asks) and replayed into its poisoned output gives `want` bit for bit."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)

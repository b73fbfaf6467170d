"""tcgemm: INT8 tensor-core GEMM for PyTorch.

    import tcgemm
    c = tcgemm.int8_gemm(a, b)                      # int8/uint8 [M,K] @ [K,N] -> exact int32 [M,N]
    d = tcgemm.gemm(a, b, c, alpha=2, beta=-1)      # D = alpha*A@B + beta*C in int32
    q, s = tcgemm.quantize(x, "token")              # symmetric int8 with fp32 scales (tensor/token/group)
    y = tcgemm.scaled_gemm(q, qw.t(), s, sw, bias)  # int8 GEMM with the scales fused -> bf16
    y = tcgemm.quant_linear(x, qw, sw, bias)        # quantize + scaled_gemm as one op (x's dtype)
    lin = tcgemm.QuantLinear.from_linear(linear)    # W8A8 drop-in for nn.Linear
    lin = tcgemm.QuantLinear.from_linear(linear, scheme=tcgemm.W8A8_BLOCK)  # a scheme, as one value
    report = tcgemm.quantize_model(model)           # swaps a model's nn.Linear layers in place
    packed = tcgemm.pack_int4(q)                    # int8 [N,K] in [-8,7] -> uint8 [N,K/2], two a byte
    lin = tcgemm.QuantLinear.from_linear(linear, scheme=tcgemm.W4A8)   # 4-bit weights, int8 activations
    with tcgemm.calibrate(model, second_moments=True) as calib, torch.no_grad():
        model(sample)
    tcgemm.quantize_model(model, scheme=tcgemm.W4A8, calibration=calib, gptq=tcgemm.GPTQ())
"""

from ._ops import (
    BACKENDS, available_backends, backends_for, gemm, int4_gemm, int8_gemm, quant_linear, scaled_gemm, supports,
    unpack_int4,
)
from ._quantize import quantize
from . import reference, rotation
from .int4 import pack_int4
from .calibration import calibrate
from .gptq import GPTQ
from .layer import QuantLinear, register_linear_adapter
from .model import QuantizeReport, quantize_model
from .fuse import FuseReport, fuse_siblings, unfuse_siblings
from . import nn  # noqa: E402  (tcgemm.nn: the layer and its recipes under one name)
from .scheme import (
    PRESETS,
    W4A8,
    W4A8_GROUP,
    W4A8_GROUP32,
    W4A8_GROUP64,
    W4A8_GROUP_ASYMMETRIC,
    W8A8_ASYMMETRIC,
    W8A8_BLOCK,
    W8A8_CHANNEL_GROUP,
    W8A8_DYNAMIC,
    W8A8_GROUP,
    W8A8_STATIC,
    W8A8_STATIC_ASYMMETRIC,
    ActivationArgs,
    QuantScheme,
    WeightArgs,
)

__all__ = [
    "ActivationArgs",
    "BACKENDS",
    "GPTQ",
    "PRESETS",
    "QuantScheme",
    "W4A8",
    "W4A8_GROUP",
    "W4A8_GROUP32",
    "W4A8_GROUP64",
    "W4A8_GROUP_ASYMMETRIC",
    "W8A8_ASYMMETRIC",
    "W8A8_BLOCK",
    "W8A8_CHANNEL_GROUP",
    "W8A8_DYNAMIC",
    "W8A8_GROUP",
    "W8A8_STATIC",
    "W8A8_STATIC_ASYMMETRIC",
    "WeightArgs",
    "backends_for",
    "QuantLinear",
    "QuantizeReport",
    "FuseReport",
    "available_backends",
    "calibrate",
    "gemm",
    "int8_gemm",
    "pack_int4",
    "int4_gemm",
    "unpack_int4",
    "quantize",
    "quant_linear",
    "quantize_model",
    "fuse_siblings",
    "unfuse_siblings",
    "reference",
    "scaled_gemm",
    "supports",
]
__version__ = "0.1.0"


@register_linear_adapter
def _sharded_linear(linear, name):
    # An nn.Linear sharded by torch's tensor-parallel styles (DTensor weights): tcgemm.parallel,
    # imported only when such a layer is quantized.
    from .parallel import adapt_sharded_linear

    return adapt_sharded_linear(linear, name)


def __getattr__(name):
    # tcgemm.parallel imports torch.distributed's tensor parallelism (about 0.5 s): on first use.
    if name == "parallel":
        import importlib

        return importlib.import_module(".parallel", __name__)
    raise AttributeError(f"module 'tcgemm' has no attribute {name!r}")

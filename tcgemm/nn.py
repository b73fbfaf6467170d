"""``tcgemm.nn``: the quantized layer and its recipes under one name, as ``torch.nn`` gathers layers.

    import tcgemm.nn
    qlin = tcgemm.nn.QuantLinear.from_linear(linear)
    report = tcgemm.nn.quantize_model(model, skip=("lm_head",))

Each name is defined in the module of its job and re-exported here: the layer
(:mod:`tcgemm.layer`), weight quantization (:mod:`tcgemm.weights`, :mod:`tcgemm.gptq`), calibration
and SmoothQuant (:mod:`tcgemm.calibration`), whole-model quantization (:mod:`tcgemm.model`).
"""

from .calibration import Calibration, asymmetric_scale, calibrate, smooth_factors
from .gptq import GPTQ
from .layer import QuantLinear
from .model import QuantizeReport, quantize_model
from .weights import quantize_weight, weight_scale_shape

__all__ = [
    "Calibration", "GPTQ", "QuantLinear", "QuantizeReport", "asymmetric_scale", "calibrate", "quantize_model",
    "quantize_weight", "smooth_factors", "weight_scale_shape",
]

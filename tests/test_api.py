"""What a user meets in the API: capability queries with preset names, the answers on a machine
without a GPU, scales that compose as returned, group-scale values refused where they enter a
layer, and the package's structure (one module a job, no import cycle, one home for the
granularity names). CPU only."""

import ast
import math
import pathlib

import pytest
import torch
from torch import nn

import tcgemm
import tcgemm.nn
from tcgemm import scheme as scheme_module

PACKAGE = pathlib.Path(tcgemm.__file__).parent


# ----------------------------------------------------------------------------------------------
# Capability queries


@pytest.mark.parametrize("preset", sorted(tcgemm.PRESETS))
def test_capability_queries_take_preset_names(preset):
    value = tcgemm.PRESETS[preset]
    for op in ("scaled_gemm", "quant_linear"):
        assert tcgemm.backends_for(op, preset, device="cpu") == tcgemm.backends_for(op, value, device="cpu")
        for backend in tcgemm.BACKENDS:
            assert tcgemm.supports(backend, op, preset) == tcgemm.supports(backend, op, value)


def test_per_block_presets_need_the_promoting_kernels():
    for backend in tcgemm.BACKENDS:
        per_block = "per_block" in tcgemm._library.BACKEND_EPILOGUES[backend]
        assert tcgemm.supports(backend, "scaled_gemm", "w8a8-block") == per_block
    assert tcgemm.supports("cpu", "scaled_gemm", "w8a8-block")
    assert tcgemm.backends_for("quant_linear", "w4a8", device="cpu") == ["cpu"]


def test_capability_queries_name_a_bad_scheme():
    with pytest.raises(ValueError,
                       match=r"tcgemm.supports: scheme must be a QuantScheme or one of 'w8a8', .*got 'w3a8'"):
        tcgemm.supports("cpu", "scaled_gemm", "w3a8")
    with pytest.raises(TypeError, match="tcgemm.supports: scheme must be a QuantScheme or a preset name, got int"):
        tcgemm.backends_for("scaled_gemm", 8, device="cpu")


def test_available_backends_without_a_gpu_answers():
    if torch.cuda.is_available():
        pytest.skip("answers for the visible GPU here")
    assert tcgemm.available_backends("cuda") == []
    assert tcgemm.available_backends("cuda:1") == []
    assert tcgemm.available_backends(0) == []
    assert tcgemm.backends_for("gemm", device="cuda") == []
    assert tcgemm.available_backends() == ["cpu"]
    with pytest.raises(ValueError, match="argument 'device' must be a cpu or cuda device, got meta"):
        tcgemm.available_backends("meta")


# ----------------------------------------------------------------------------------------------
# Scales compose as returned


def test_quantized_weight_scales_compose_with_quant_linear():
    """tcgemm.quantize of a weight gives per-row scales [N, 1]; quant_linear takes them as they
    are, as per-channel scales (the same bits as [N])."""
    g = torch.Generator().manual_seed(0)
    for n, k in [(96, 300), (40, 64), (1, 130)]:
        w = torch.randn(n, k, generator=g)
        x = torch.randn(5, k, generator=g)
        bias = torch.randn(n, generator=g)
        qw, sw = tcgemm.quantize(w)
        assert sw.shape == (n, 1)
        y = tcgemm.quant_linear(x, qw, sw, bias)
        assert torch.equal(y, tcgemm.quant_linear(x, qw, sw.reshape(-1), bias))
        qx, sx = tcgemm.quantize(x)
        assert torch.equal(y, tcgemm.scaled_gemm(qx, qw.t(), sx, sw.reshape(-1), bias, out_dtype=x.dtype))


def test_weight_scale_shape_errors_name_the_per_channel_shapes():
    with pytest.raises(ValueError, match=r"'weight_scale' must have shape \[N\] = \[8\] or \[N, 1\] \(per-channel\)"):
        tcgemm.quant_linear(torch.randn(2, 300), torch.zeros(8, 300, dtype=torch.int8), torch.ones(8, 2))


# ----------------------------------------------------------------------------------------------
# Group-scale values where they enter a layer


def _w4a8_layer(device="cpu"):
    return tcgemm.QuantLinear.from_linear(nn.Linear(256, 24, device=device), scheme="w4a8")


@pytest.mark.parametrize("bad", [0, 17, -3])
def test_group_scale_values_refused_by_the_layer(device, bad):
    """On the CPU and through the layer on a GPU (the layer reads a CUDA table back once, at
    set-up; the GPU ops themselves do not read it)."""
    layer = _w4a8_layer(device)
    table = layer.weight_group_scale.clone()
    table[3, 1] = bad
    with pytest.raises(ValueError, match=r"QuantLinear: argument 'weight_group_scale' must hold values in \[1, 16\]"):
        layer.weight_group_scale = table
    with pytest.raises(ValueError, match=r"QuantLinear.load_state_dict: 'weight_group_scale' must hold values in "
                                         r"\[1, 16\]"):
        layer.load_state_dict(dict(layer.state_dict(), weight_group_scale=table))
    fresh = tcgemm.QuantLinear(256, 24, scheme="w4a8", device=device)
    with pytest.raises(ValueError, match=r"must hold values in \[1, 16\]"):
        fresh.weight_group_scale = table
    assert fresh.weight_group_scale.eq(1).all()
    with pytest.raises(ValueError, match=r"argument 'group_scale' must hold values in \[1, 16\]"):
        tcgemm.int4_gemm(torch.zeros(2, 256, dtype=torch.int8), layer.weight.cpu(), table.cpu())


def test_group_scale_assignment_in_range_is_taken():
    layer = _w4a8_layer()
    table = torch.full_like(layer.weight_group_scale, 16)
    layer.weight_group_scale = table
    assert layer.weight_group_scale is table


def test_quantize_weight_makes_group_scales_in_range():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(64, 384, generator=g) * torch.logspace(-6, 3, 64)[:, None]
    w[5] = 0
    w[7, :128] = 0
    for grid in ("mse", "amax"):
        _, _, table = tcgemm.nn.quantize_weight(w, "channel", bits=4, grid=grid)
        assert table.dtype == torch.int8 and int(table.min()) >= 1 and int(table.max()) <= 16


# ----------------------------------------------------------------------------------------------
# The package by task


def _module_names():
    return sorted(p.stem for p in PACKAGE.glob("*.py"))


def _imports(module: str) -> set[str]:
    """The tcgemm modules ``module`` imports, at module level or inside functions."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found.update(alias.name for alias in node.names)
            elif node.module and node.module.split(".")[0] == "tcgemm":
                parts = node.module.split(".")
                found.add(parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "tcgemm":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
    return {m for m in found if m in _module_names() and m != module}


def test_no_import_cycle_among_the_modules():
    """The package's __init__ assembles it; no other module imports the package root, and the
    import graph of the others (function-level imports included) has no cycle."""
    graph = {m: _imports(m) for m in _module_names() if m != "__init__"}
    for module, deps in graph.items():
        assert "__init__" not in deps, f"tcgemm.{module} imports the package root"
    state: dict[str, int] = {}

    def visit(module, path):
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                pytest.fail("import cycle: " + " -> ".join(f"tcgemm.{m}" for m in cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])


def test_the_layer_knows_nothing_of_parallelism_or_recipes_above_it():
    assert not _imports("layer") & {"parallel", "model", "compressed", "nn"}


def test_modules_stay_small():
    for path in PACKAGE.glob("*.py"):
        lines = len(path.read_text().splitlines())
        assert lines <= 600, f"tcgemm/{path.name} has {lines} lines (one module a job, at most 600)"


def test_granularity_names_have_one_home():
    """The granularity tuples are defined in tcgemm.scheme and only bound elsewhere by import."""
    names = {"WEIGHT_GRANULARITIES", "ACTIVATION_GRANULARITIES", "LAYER_ACTIVATIONS", "INT4_GRANULARITIES"}
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in names:
                    assert path.name == "scheme.py", f"tcgemm/{path.name} defines {target.id}"
    assert scheme_module.ACTIVATION_GRANULARITIES == ("tensor", "token", "group")
    assert not hasattr(tcgemm.nn, "ACTIVATION_GRANULARITIES")


def test_public_names_keep_working():
    for name in ("QuantLinear", "GPTQ", "QuantizeReport", "calibrate", "quantize_model"):
        assert getattr(tcgemm, name) is getattr(tcgemm.nn, name)
    for name in tcgemm.nn.__all__:
        assert getattr(tcgemm.nn, name) is not None
    from tcgemm.calibration import Calibration, asymmetric_scale, calibrate, smooth_factors
    from tcgemm.gptq import GPTQ
    from tcgemm.layer import QuantLinear
    from tcgemm.model import quantize_model
    from tcgemm.weights import quantize_weight, weight_scale_shape

    assert (tcgemm.nn.Calibration, tcgemm.nn.asymmetric_scale, tcgemm.nn.calibrate, tcgemm.nn.smooth_factors,
            tcgemm.nn.GPTQ, tcgemm.nn.QuantLinear, tcgemm.nn.quantize_model, tcgemm.nn.quantize_weight,
            tcgemm.nn.weight_scale_shape) == (Calibration, asymmetric_scale, calibrate, smooth_factors, GPTQ,
                                              QuantLinear, quantize_model, quantize_weight, weight_scale_shape)
    assert math.isclose(float(asymmetric_scale(torch.tensor(-1.0), torch.tensor(3.0))[0]), 4 / 255, rel_tol=1e-6)


def test_linear_adapters_must_be_callable():
    from tcgemm.layer import register_linear_adapter

    with pytest.raises(TypeError, match="register_linear_adapter: adapter must be callable, got int"):
        register_linear_adapter(3)

"""Tensor-parallel QuantLinear (tcgemm.parallel) on torch.distributed.

Every check runs in two processes (world size 2) over gloo: on the CPU in CI, and in the GPU
suite as two processes sharing one GPU (CUDA tensors over gloo), so the GPU kernels run on
shards; an NCCL run needs two GPUs and skips elsewhere. What is checked:
- column-wise: each rank's output is its columns of the unsharded layer's output, bit for bit
  (every rank quantizes the whole input as the unsharded layer does);
- row-wise: the output is the sum of the ranks' own partial outputs, bit for bit (the bias once),
  and lies within the stated bound of the exact value of that sharded computation (each rank's
  own activation quantization); with per-block activations, whose blocks the shards keep whole,
  within two output roundings of the unsharded layer;
- a two-layer Llama-shaped model parallelized with a plan of tcgemm styles gives the unsharded
  model's logits; per-rank state dicts save and load; a full state dict loads into the sharded
  model; shard-then-quantize gives the weights of quantize-then-shard; a compressed-tensors
  checkpoint loads into a model sharded by torch's styles;
- sizes a world size cannot split raise a ValueError naming the layer and the sizes.
"""

import dataclasses
import faulthandler
import os
import tempfile
import time
import traceback

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

import tcgemm
from tcgemm._scales import expand_weight_scale
from cases import ulp
from tcgemm.reference import quantize_reference

WORLD = 2
K, N = 512, 512  # shards of 256: whole blocks of 128 along both dimensions
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed")

SCHEMES = {name: tcgemm.PRESETS[name] for name in tcgemm.PRESETS}
SCHEMES["w8a8-smooth"] = dataclasses.replace(tcgemm.W8A8_DYNAMIC, smooth=0.5)
SCHEMES["w8a8-rotate"] = dataclasses.replace(tcgemm.W8A8_DYNAMIC, rotate=True)
SCHEMES["w4a8-block-acts"] = dataclasses.replace(tcgemm.W4A8, activations=tcgemm.W8A8_BLOCK.activations)


# ---------------------------------------------------------------------------------------------
# Running a worker in WORLD processes


# Over gloo with CUDA tensors (torch 2.11, two processes on one H200) the row-wise all-reduce
# works, but the checks that go through DTensor redistribution (Replicate() outputs, DTensor
# inputs, torch's styles, full_tensor) ended the second process with SIGSEGV: they run on the CPU
# and over NCCL.
def gathers_work(device):
    return device == "cpu" or BACKEND == "nccl"


BACKEND = "gloo"  # the worker process's backend, set by _entry


def _entry(rank, world, folder, worker, device, backend):
    import torch.distributed as dist

    global BACKEND
    BACKEND = backend
    faulthandler.enable(all_threads=True)  # a crash shows every thread's Python stack
    # torch.compile inside a worker: compiled in the process itself (no pool of compile processes
    # beside gloo's threads), into a cache of its own (the ranks compile the same graph at once).
    # The pool and the shared cache went with "terminate called without an active exception" in a
    # rank while both compiled, once in 120 CPU runs of test_layouts (torch 2.15, 2 cores).
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, f"inductor{rank}")
    import torch._inductor.config

    torch._inductor.config.compile_threads = 1

    if device == "cuda":
        torch.cuda.set_device(0 if backend == "gloo" else rank)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: the loopback, whatever else the machine has
    dist.init_process_group(backend, init_method=f"file://{folder}/store", rank=rank, world_size=world)
    results = {}
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(device, (world,))
        globals()[worker](rank, world, mesh, device, results, folder)
    except Exception:  # reported by the parent with the traceback
        results["worker raised"] = traceback.format_exc()
    torch.save(results, os.path.join(folder, f"result{rank}.pt"))
    # Both ranks leave together: a gloo group torn down while its peer still sends can abort the
    # process ("terminate called without an active exception"; seen once in about 50 CPU runs).
    dist.barrier()
    dist.destroy_process_group()


def run_workers(worker, device="cpu", backend="gloo", world=WORLD, timeout=300.0):
    """Runs ``worker(rank, world, mesh, device, results, folder)`` in ``world`` processes; returns
    every rank's ``results`` (check name -> None when it passed, else what failed)."""
    with tempfile.TemporaryDirectory() as folder:
        context = mp.start_processes(_entry, args=(world, folder, worker, device, backend), nprocs=world,
                                     join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        while not context.join(timeout=5):
            if time.monotonic() > deadline:
                for p in context.processes:
                    p.kill()
                pytest.fail(f"{worker} did not finish in {timeout} s")
        return [torch.load(os.path.join(folder, f"result{r}.pt")) for r in range(world)]


def assert_all_passed(per_rank):
    failed = [f"rank {r}: {name}: {what}" for r, res in enumerate(per_rank) for name, what in res.items() if what]
    assert per_rank[0], "no check ran"
    assert not failed, f"{len(failed)} failed:\n" + "\n".join(failed[:8])


def record_refusal(results, key, call, *words, error=ValueError):
    """results[key]: None where call() raises `error` whose message holds every one of `words`;
    else what happened instead (no error, or the message)."""
    try:
        call()
    except error as err:
        results[key] = None if all(w in str(err) for w in words) else str(err)
        return
    results[key] = "accepted"


# ---------------------------------------------------------------------------------------------
# Single layers


def _float_linear(seed, bias, device):
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(K, N, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(N, K, generator=g) * 0.05)
        if bias:
            lin.bias.copy_(torch.randn(N, generator=g))
    return lin.to(device)


def _input(seed, shape, dtype, device):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, K, generator=g) + 0.3).to(dtype).to(device)


def _quantized(scheme, lin, x):
    kw = {}
    if scheme.static or scheme.smooth is not None:
        kw["input_amax"] = x.detach().float().abs().flatten(0, -2).amax(0)
    if scheme.static and scheme.asymmetric:
        flat = x.detach().float().flatten(0, -2)
        kw["input_range"] = (flat.amin(0), flat.amax(0))
    return tcgemm.QuantLinear.from_linear(lin, scheme=scheme, **kw)


def _exact_partial(layer, x):
    """float64 value and magnitude sum of a (shard) layer without static, smoothed, rotated or
    asymmetric activations: its own quantization of x (the reference), exact products."""
    x2d = x.detach().cpu().float().flatten(0, -2)
    m, k = x2d.shape
    kb = -(-k // 128)
    if layer.activation_granularity == "block":
        q, s = quantize_reference(x2d, "group")
        sx = s.double().reshape(m, kb).repeat_interleave(128, dim=1)[:, :k]
    else:
        q, s = quantize_reference(x2d, "token")
        sx = s.double().reshape(m, 1)
    xq = q.double() * sx
    w = layer.int_weight().cpu().double() * expand_weight_scale(
        layer.weight_scale.cpu(), layer.out_features, layer.in_features, layer.weight_granularity,
        layer.scheme.weights.group_size).double()
    b = layer.bias.detach().cpu().double() if layer.bias is not None and layer._add_bias else None
    e = xq @ w.T + (b if b is not None else 0)
    mag = xq.abs() @ w.abs().T + (b.abs() if b is not None else 0)
    return e, mag, kb


def _same_slice(shard, full, style, rank, world):
    """None when the shard's weight as the input meets it (int8 or unpacked 4-bit values times
    their scales and SmoothQuant multipliers), its zero-point sums, bias and static input scale are
    the unsharded layer's slice; else what differs."""
    w, ws = full._op_weight(torch.float32), shard._op_weight(torch.float32)
    n, k = full.out_features, full.in_features
    want = (w.narrow(0, rank * n // world, n // world) if style == "colwise"
            else w.narrow(1, rank * k // world, k // world))
    problems = []
    if not torch.equal(ws, want):
        problems.append("weight")
    if shard.weight_colsum is not None and not torch.equal(shard.weight_colsum,
                                                           shard.int_weight().sum(1, dtype=torch.int32)):
        problems.append("weight_colsum")
    if full.bias is not None:
        b = full.bias if style == "rowwise" else full.bias.narrow(0, rank * n // world, n // world)
        if not torch.equal(shard.bias, b):
            problems.append("bias")
    if full.input_scale is not None and not torch.equal(shard.input_scale, full.input_scale):
        problems.append("input_scale")
    return ", ".join(problems) or None


def _plain(scheme):
    return not (scheme.static or scheme.smooth is not None or scheme.rotate or scheme.asymmetric)


def layer_worker(rank, world, mesh, device, results, folder):
    from tcgemm import parallel as tp

    for sname, scheme in SCHEMES.items():
        for bias in (True, False):
            for shape, dtype in (((7,), torch.float32), ((2, 5), torch.bfloat16), ((3,), torch.float16)):
                lin = _float_linear(1, bias, device)
                x = _input(2, shape, dtype, device)
                full = _quantized(scheme, lin, x)
                with torch.no_grad():
                    y1 = full(x)
                for style in ("colwise", "rowwise"):
                    case = f"{sname} bias={bias} x{list(x.shape)} {dtype} {style}"
                    layer = _quantized(scheme, lin, x)
                    tp.parallelize_module(layer, mesh, tp.ColwiseParallel() if style == "colwise"
                                          else tp.RowwiseParallel())
                    kl, nl = K // world, N // world
                    results[f"{case}: the shard's weight"] = _same_slice(layer, full, style, rank, world)
                    with torch.no_grad():
                        if style == "colwise":
                            y2 = layer(x)
                            want = y1[..., rank * nl:(rank + 1) * nl]
                            results[case] = None if torch.equal(y2, want) else (
                                f"columns differ from the unsharded layer by {(y2 - want).abs().max()}")
                            continue
                        y2 = layer(x[..., rank * kl:(rank + 1) * kl])
                        shards = []
                        for r in range(world):
                            shard = _quantized(scheme, lin, x)
                            tp.shard_quant_linear(shard, "rowwise", r, world)
                            shards.append(shard)
                        parts = [s(x[..., r * kl:(r + 1) * kl]) for r, s in enumerate(shards)]
                        emulated = parts[0] + parts[1]
                    problems = []
                    if y2.dtype != x.dtype or y2.shape != y1.shape:
                        problems.append(f"output {y2.dtype} {list(y2.shape)}")
                    elif not torch.equal(y2, emulated):
                        problems.append(f"differs from the sum of the shards' outputs by {(y2 - emulated).abs().max()}")
                    if _plain(scheme) and not problems:
                        e = mag = 0
                        bound = 0
                        for r, s in enumerate(shards):
                            er, mr, kb = _exact_partial(s, x[..., r * kl:(r + 1) * kl])
                            e, mag = e + er, mag + mr
                            bound = bound + ulp(er, dtype) + 8 * kb * 2.0**-24 * mr
                        bound = bound + ulp(e, dtype)
                        got = y2.detach().cpu().double().reshape(e.shape)
                        if not bool(((got - e).abs() <= bound).all()):
                            problems.append(f"outside the bound of the sharded computation by "
                                            f"{float(((got - e).abs() - bound).max())}")
                        if layer.activation_granularity == "block":
                            ref = y1.detach().cpu().double().reshape(e.shape)
                            tol = 2 * ulp(e, dtype) + bound
                            if not bool(((got - ref).abs() <= tol).all()):
                                problems.append("per-block activations: not within the bound of the unsharded layer")
                    results[case] = "; ".join(problems) or None


def layout_worker(rank, world, mesh, device, results, folder):
    """The styles' other input and output layouts, and DTensor inputs."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    from tcgemm import parallel as tp

    lin = _float_linear(1, True, device)
    x = _input(2, (4,), torch.float32, device)
    kl = K // world

    def layer(style):
        q = _quantized(tcgemm.W8A8_DYNAMIC, lin, x)
        tp.parallelize_module(q, mesh, style)
        return q

    with torch.no_grad():
        y1 = _quantized(tcgemm.W8A8_DYNAMIC, lin, x)(x)
        row = layer(tp.RowwiseParallel())
        want = row(x[:, rank * kl:(rank + 1) * kl])
        d = layer(tp.RowwiseParallel(use_local_output=False))(x[:, rank * kl:(rank + 1) * kl])
        results["rowwise, DTensor output Replicate()"] = None if (
            isinstance(d, DTensor) and d.placements == (Replicate(),) and torch.equal(d.to_local(), want)) else repr(d)
        style = tp.RowwiseParallel(output_layouts=Shard(1))  # fine for a float layer (sequence parallel)
        record_refusal(results, "rowwise, output Shard(1) refused for a QuantLinear", lambda: layer(style),
                       "output_layouts")
        record_refusal(results, "rowwise, input Replicate(): a slice refused",
                       lambda: layer(tp.RowwiseParallel(input_layouts=Replicate()))(x[:, :kl]), str(K))
        y = layer(tp.RowwiseParallel(input_layouts=Replicate()))(x)
        results["rowwise, input Replicate(): the full input sliced"] = None if torch.equal(y, want) else "differs"
        with torch.enable_grad():
            record_refusal(results, "an input that requires grad refused",
                           lambda: row(x[:, rank * kl:(rank + 1) * kl].clone().requires_grad_()), "backward",
                           error=NotImplementedError)
        # torch.compile(fullgraph=True) of a sharded MLP: the hooks and the all-reduce trace
        torch.manual_seed(0)
        mlp = nn.Sequential(nn.Linear(K, 2 * K, bias=False), nn.ReLU(), nn.Linear(2 * K, N)).to(device)  # exact in any fusion
        tcgemm.quantize_model(mlp, scheme="w8a8")
        tp.parallelize_module(mlp, mesh, {"0": tp.ColwiseParallel(), "2": tp.RowwiseParallel()})
        eager = mlp(x)
        compiled = torch.compile(mlp, fullgraph=True)(x)
        results["torch.compile(fullgraph=True) of a sharded MLP"] = None if torch.equal(eager, compiled) else (
            f"differs by {(eager - compiled).abs().max()}")
        record_refusal(results, "rowwise: the full input under Shard(-1) refused", lambda: row(x), "Replicate()")
        if not gathers_work(device):
            return
        # torch's styles with other layouts, then quantize: the layouts carry over
        from torch.distributed.tensor.parallel import ColwiseParallel as TorchColwise
        from torch.distributed.tensor.parallel import RowwiseParallel as TorchRowwise
        from torch.distributed.tensor.parallel import parallelize_module as torch_parallelize

        floaty = nn.Sequential(_float_linear(1, True, device), _float_linear(1, True, device))
        torch_parallelize(floaty, mesh, {"0": TorchColwise(output_layouts=Replicate()),
                                         "1": TorchRowwise(input_layouts=Replicate())})
        tcgemm.quantize_model(floaty)
        q0 = _quantized(tcgemm.W8A8_DYNAMIC, _float_linear(1, True, device), x)
        q1 = _quantized(tcgemm.W8A8_DYNAMIC, _float_linear(1, True, device), x)
        y0 = floaty[0](x)
        results["torch's colwise with Replicate() output, then quantized"] = None if torch.equal(y0, q0(x)) else (
            f"output {list(y0.shape)}")
        tp.shard_quant_linear(q1, "rowwise", rank, world)
        parts = floaty[1](y0)
        results["torch's rowwise with Replicate() input, then quantized"] = None if (
            floaty[1].tensor_parallel.style == "rowwise" and parts.shape == y0.shape) else f"{floaty[1]}"
        # shardings that cannot be carried over to a QuantLinear name the layer
        def dtensor_linear(placements, on_mesh=mesh):
            lin2 = _float_linear(1, False, device)
            lin2.weight = nn.Parameter(distribute_tensor(lin2.weight.detach(), on_mesh, placements))
            return lin2

        mesh2d = init_device_mesh(device, (1, world))
        odd = {"replicated weight": (dtensor_linear([Replicate()]), "placed Replicate()"),
               "2-D mesh": (dtensor_linear([Replicate(), Shard(0)], mesh2d), "2-D mesh")}
        hooked = dtensor_linear([Shard(0)])
        hooked.register_forward_pre_hook(lambda mod, args: args)
        odd["unreadable hooks"] = (hooked, "cannot read")
        for what, (lin2, words) in odd.items():
            record_refusal(results, f"shard then quantize, {what}: refused",
                           lambda: tcgemm.QuantLinear.from_linear(lin2, name="blocks.3.fc"), words, "'blocks.3.fc'")
        y = layer(tp.ColwiseParallel(output_layouts=Replicate()))(x)
        results["colwise, output Replicate(): the whole output"] = None if torch.equal(y, y1) else "differs"
        d = layer(tp.ColwiseParallel(use_local_output=False))(x)
        results["colwise, DTensor output Shard(-1)"] = None if (
            isinstance(d, DTensor) and d.placements == (Shard(1),) and torch.equal(d.full_tensor(), y1)) else repr(d)
        y = layer(tp.ColwiseParallel())(distribute_tensor(x, mesh, [Replicate()]))
        results["colwise, DTensor input"] = None if torch.equal(y, y1[:, rank * (N // world):(rank + 1) * (N // world)]) \
            else "differs"
        y = row(distribute_tensor(x, mesh, [Shard(1)]))
        results["rowwise, DTensor input Shard(-1)"] = None if torch.equal(y, want) else "differs"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_layouts(device):
    assert_all_passed(run_workers("layout_worker", device))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_sharded_layers(device):
    assert_all_passed(run_workers("layer_worker", device))


# ---------------------------------------------------------------------------------------------
# Errors (no processes needed)


@pytest.mark.parametrize("scheme, style, world, k, n, words", [
    ("w8a8", "colwise", 3, 512, 512, ["out_features=512", "3 ranks"]),
    ("w8a8", "rowwise", 3, 512, 512, ["in_features=512", "3 ranks"]),
    ("w8a8-block", "colwise", 2, 512, 384, ["out_features=384", "shards of 192", "128x128"]),
    ("w8a8-group", "rowwise", 2, 384, 512, ["in_features=384", "shards of 192", "group weight scales"]),
    ("w4a8", "rowwise", 4, 768, 256, ["in_features=768", "shards of 192", "4-bit"]),
    ("w8a8-channel-group", "rowwise", 2, 384, 256, ["shards of 192", "per-block activation scales"]),
])
def test_unsplittable_sizes_name_the_layer(scheme, style, world, k, n, words):
    from tcgemm import parallel as tp

    layer = tcgemm.QuantLinear(k, n, scheme=scheme)
    with pytest.raises(ValueError) as err:
        tp.shard_quant_linear(layer, style, 0, world, name="model.layers.0.mlp.up_proj")
    for word in ["'model.layers.0.mlp.up_proj'"] + words:
        assert word in str(err.value), str(err.value)
    assert layer.tensor_parallel is None and layer.in_features == k  # left whole


def test_row_wise_channel_weights_split_anywhere_even():
    from tcgemm import parallel as tp

    layer = tcgemm.QuantLinear(384, 256, scheme="w8a8")
    tp.shard_quant_linear(layer, "rowwise", 1, 2)
    assert layer.in_features == 192 and layer.weight.shape == (256, 192) and layer.weight_scale.shape == (256,)
    assert layer.tensor_parallel.style == "rowwise" and not layer._add_bias


# ---------------------------------------------------------------------------------------------
# A two-layer Llama-shaped model


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        # Heads from the projections' (local) widths: a column-wise shard holds whole heads.
        q = self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):
    def __init__(self, dim, hidden, heads, kv_heads):
        super().__init__()
        self.input_norm, self.post_norm = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.self_attn = Attention(dim, heads, kv_heads)
        self.mlp = nn.ModuleDict(dict(gate_proj=nn.Linear(dim, hidden, bias=False),
                                      up_proj=nn.Linear(dim, hidden, bias=False),
                                      down_proj=nn.Linear(hidden, dim, bias=False)))

    def forward(self, x):
        x = x + self.self_attn(self.input_norm(x))
        h = self.post_norm(x)
        m = self.mlp
        return x + m["down_proj"](nn.functional.silu(m["gate_proj"](h)) * m["up_proj"](h))


class TinyLlama(nn.Module):
    def __init__(self, vocab=96, dim=512, hidden=1024, heads=8, kv_heads=4, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, hidden, heads, kv_heads) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def tiny_llama(device, kv_heads=4):
    torch.manual_seed(0)
    model = TinyLlama(kv_heads=kv_heads)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.05)
    return model.to(device)


def llama_plan(colwise, rowwise):
    plan = {}
    for i in range(2):
        for proj in ("q_proj", "k_proj", "v_proj"):
            plan[f"layers.{i}.self_attn.{proj}"] = colwise()
        plan[f"layers.{i}.self_attn.o_proj"] = rowwise()
        plan[f"layers.{i}.mlp.gate_proj"] = colwise()
        plan[f"layers.{i}.mlp.up_proj"] = colwise()
        plan[f"layers.{i}.mlp.down_proj"] = rowwise()
    return plan


MODEL_SCHEMES = ("w8a8-block", "w8a8", "w4a8", "w4a8-block-acts")


def _logits_close(got, want, scheme):
    """Per-block activations quantize the same values sharded or not: the logits differ by
    roundings. Per-token activations are quantized per rank's slice in row-wise layers: the
    logits differ by the activations' quantization, at most that of the unsharded model."""
    err = (got.float() - want.float()).abs().max().item()
    scale = want.float().abs().max().item()
    limit = 1e-4 if SCHEMES[scheme].activations.granularity == "group" else 0.05
    return None if err <= limit * scale else f"logits differ by {err} (max |logit| {scale})"


def model_worker(rank, world, mesh, device, results, folder):
    from torch.distributed.tensor.parallel import ColwiseParallel as TorchColwise
    from torch.distributed.tensor.parallel import RowwiseParallel as TorchRowwise

    from tcgemm import parallel as tp

    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(3)).to(device)
    for sname in MODEL_SCHEMES:
        scheme = SCHEMES[sname]
        reference = tiny_llama(device)
        tcgemm.quantize_model(reference, scheme=scheme, skip=["lm_head"])
        with torch.no_grad():
            want = reference(ids)
        # quantize, then shard with a plan of tcgemm styles
        model = tiny_llama(device)
        tcgemm.quantize_model(model, scheme=scheme, skip=["lm_head"])
        tp.parallelize_module(model, mesh, llama_plan(tp.ColwiseParallel, tp.RowwiseParallel))
        with torch.no_grad():
            got = model(ids)
        results[f"{sname}: logits of the sharded model"] = _logits_close(got, want, sname)
        down = model.layers[0].mlp["down_proj"]
        results[f"{sname}: the shards' shapes"] = None if (
            down.in_features == 1024 // world and down.tensor_parallel.style == "rowwise"
            and model.layers[1].mlp["up_proj"].weight.shape[0] == 1024 // world) else f"{down}"
        # per-rank state dict: save, load into a fresh sharded model, same logits
        path = os.path.join(folder, f"{sname}-rank{rank}.pt")
        torch.save(model.state_dict(), path)
        fresh = tiny_llama(device)
        tcgemm.quantize_model(fresh, scheme=scheme, skip=["lm_head"])
        for m in fresh.modules():  # scramble, so that only the load can restore the buffers
            if isinstance(m, tcgemm.QuantLinear):
                m.weight_scale.mul_(3.0)
        tp.parallelize_module(fresh, mesh, llama_plan(tp.ColwiseParallel, tp.RowwiseParallel))
        fresh.load_state_dict(torch.load(path))
        with torch.no_grad():
            again = fresh(ids)
        results[f"{sname}: per-rank state dict round trip"] = None if torch.equal(again, got) else "logits differ"
        # a full (unsharded) state dict loads into the sharded model
        fresh.load_state_dict(reference.state_dict())
        with torch.no_grad():
            again = fresh(ids)
        results[f"{sname}: full state dict into the sharded model"] = (
            None if torch.equal(again, got) else "logits differ")
        fresh.load_state_dict(reference.state_dict(), assign=True)
        views = [k for k, t in fresh.state_dict().items()
                 if t.untyped_storage().nbytes() != t.numel() * t.element_size()]
        with torch.no_grad():
            again = fresh(ids)
        results[f"{sname}: full state dict, assign=True"] = None if torch.equal(again, got) and not views else (
            f"views of the full tensors: {views[:3]}")
        if not gathers_work(device):
            continue
        # shard the float model with torch's styles, then quantize: the same weights
        floaty = tiny_llama(device)
        tp.parallelize_module(floaty, mesh, llama_plan(TorchColwise, TorchRowwise))
        tcgemm.quantize_model(floaty, scheme=scheme, skip=["lm_head"])
        same = all(torch.equal(a, b) for (ka, a), (kb, b) in zip(sorted(model.state_dict().items()),
                                                                 sorted(floaty.state_dict().items()))
                   if ka == kb)
        keys_same = sorted(model.state_dict()) == sorted(floaty.state_dict())
        with torch.no_grad():
            floaty_logits = floaty(ids)
        results[f"{sname}: shard then quantize"] = None if (same and keys_same and torch.equal(floaty_logits, got)) \
            else f"buffers same {same}, keys same {keys_same}"
    # an unsplittable size through parallelize_module names the layer
    model = tiny_llama(device, kv_heads=2)  # k_proj: 2 heads of 64
    tcgemm.quantize_model(model, scheme="w8a8-block", skip=["lm_head"])
    record_refusal(results, "k_proj of 128 features, block scales, 2 ranks",
                   lambda: tp.parallelize_module(model, mesh, {"lm_head": tp.ColwiseParallel(),
                                                               "layers.0.self_attn.k_proj": tp.ColwiseParallel()}),
                   "'layers.0.self_attn.k_proj'", "out_features=128")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_llama_model_sharded(device):
    assert_all_passed(run_workers("model_worker", device))


def compressed_worker(rank, world, mesh, device, results, folder):
    if not gathers_work(device):  # a model sharded by torch's styles
        results["skipped: DTensor gathers over gloo on CUDA"] = None
        return
    from torch.distributed.tensor.parallel import ColwiseParallel as TorchColwise
    from torch.distributed.tensor.parallel import RowwiseParallel as TorchRowwise

    from tcgemm import compressed
    from tcgemm import parallel as tp

    ids = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(3)).to(device)
    for sname in ("w8a8", "w4a8"):
        model = tiny_llama(device)
        tcgemm.quantize_model(model, scheme=sname, skip=["lm_head"])
        path = os.path.join(folder, f"ckpt-{sname}")
        if rank == 0:
            compressed.save_compressed(model, path)
        torch.distributed.barrier()
        # the checkpoint loaded whole, then sharded with tcgemm's styles
        whole = tiny_llama(device)
        compressed.load_compressed(whole, path)
        tp.parallelize_module(whole, mesh, llama_plan(tp.ColwiseParallel, tp.RowwiseParallel))
        with torch.no_grad():
            want = whole(ids)
        record_refusal(results, f"{sname}: saving a sharded model refused",
                       lambda: compressed.save_compressed(whole, os.path.join(folder, f"sharded-{sname}-{rank}")),
                       "tensor-parallel shard")
        target = tiny_llama(device)
        tp.parallelize_module(target, mesh, llama_plan(TorchColwise, TorchRowwise))
        compressed.load_compressed(target, path)
        down = target.layers[1].mlp["down_proj"]
        ok = isinstance(down, tcgemm.QuantLinear) and down.tensor_parallel is not None
        with torch.no_grad():
            got = target(ids)
        results[f"{sname}: checkpoint into a sharded model"] = None if ok and torch.equal(got, want) else (
            f"sharded {ok}, logits differ by {(got - want).abs().max()}")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_compressed_checkpoint_into_sharded_model(device):
    pytest.importorskip("compressed_tensors")
    assert_all_passed(run_workers("compressed_worker", device))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL tensor parallelism needs two GPUs")
@pytest.mark.parametrize("worker", ["layer_worker", "layout_worker", "model_worker", "compressed_worker"])
def test_nccl_two_gpus(worker):
    if worker == "compressed_worker":
        pytest.importorskip("compressed_tensors")
    assert_all_passed(run_workers(worker, "cuda", backend="nccl"))

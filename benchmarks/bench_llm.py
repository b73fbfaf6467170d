"""End to end: a Llama-3-8B-shaped LlamaForCausalLM in bf16, tcgemm W8A8 and W4A8, torch int4 and torchao int8.

    python3 -m benchmarks.bench_llm [--layers 32] [--compile {off,on,both}] [--json PATH] [--png PATH]
                                    [--markdown docs/performance.md]
    python3 -m benchmarks.bench_llm --render RESULTS_JSON --markdown docs/performance.md

The model is built from a config (Llama-3-8B: hidden 4096, MLP 14336, 32 heads, 8 KV heads,
vocabulary 128256; all 32 layers by default) with random bf16 weights; transformers is an
optional import. Variants, one after the other on copies of the same model:

- bf16: the model as built;
- tcgemm channel: ``tcgemm.quantize_model`` (int8 weights per channel, activations per token);
- tcgemm block: 128x128 weight blocks, 1x128 activation groups;
- tcgemm-w4a8: ``quantize_model(scheme="w4a8")``, 4-bit weights with an fp32 scale per channel and
  int8 scales per 128 inputs, int8 activations per token;
- tcgemm-w4a8-fused: ``W4A8`` then ``tcgemm.fuse_siblings``: q, k and v (and gate and up) of each
  block stacked into one layer, x quantized once for them;
- tcgemm-w4a8-group: ``scheme="w4a8-group"``, 4-bit weights with fp32 scales per 128 inputs;
- tcgemm-w4a8-rot: ``W4A8`` with rotated inputs (``rotate=True``, ``tcgemm.rotation``);
- torch-int4: every projection a ``TorchInt4Linear`` (``benchmarks.bench_decode``): torch's int4
  weight-only kernel (``torch.ops.aten._weight_int4pack_mm``, tinygemm) on bf16 activations, the
  weights packed as torchao's ``Int4WeightOnlyConfig`` packs them (groups of 128);
- torchao: ``Int8DynamicActivationInt8WeightConfig`` when torchao is importable, as ``quantize_``
  leaves it and with every quantized linear compiled (``torch.compile``, default mode); at decode
  inside the same CUDA graphs where the step can be captured, else eager.

``--variants`` runs some of them (names as in the table, comma-separated). ``--compile on`` runs
each variant's model under ``torch.compile`` (default mode, static shapes), as PyTorch users run
decode; ``both`` runs each variant without and with it. The prompt that fills the KV cache runs
uncompiled; the compiled decode step is captured in a CUDA graph like the uncompiled one (what
``mode="reduce-overhead"`` would do). The variant that compiles its own linears runs only
uncompiled. ``--profile`` adds to each decode record one step's kernels under ``torch.profiler``:
their GPU time in all, the span from the first kernel's start to the last one's end, and the
kernels that took most (where a step's time goes beyond its projections).

The lm_head stays bf16 in every variant. Measured per variant:

- prefill: one forward over 2048 tokens (batch 1, no cache, logits of the last token), device
  events around the call, median of 5 after 2 warm-ups (``--no-prefill`` leaves it out);
- decode: tokens per second at batch 1, 8 and 32 (``--batches``): one decode step after a prompt
  of ``--context`` tokens, captured in a CUDA graph and replayed 20 times per round, median over
  5 rounds; each replay appends one position to the static KV cache (``--context`` + 192
  positions); "eager" in the JSON when the capture fails;
- bytes per parameter of the projections (every layer with in_features and out_features but the
  lm_head): each layer's tensors but its bias (packed weight and every scale) over its
  in_features x out_features;
- GPU memory: the variant's weights (parameters and buffers), and its peak: the weights plus the
  most its runs (caches, activations, graphs) allocated on top.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import gc
import inspect
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from benchmarks import report, timing
from benchmarks.bench_decode import TorchInt4Linear, layer_bytes, tensor_bytes

BATCHES = (1, 8, 32)
PREFILL_TOKENS = 2048
COMPILE = {"off": (False,), "on": (True,), "both": (False, True)}  # --compile: the runs of each variant
SELF_COMPILED = ("torchao int8 dynamic + compile",)  # variants that compile their own layers: run only uncompiled


def llama_config(layers: int):
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                       tie_word_embeddings=False)


def build_model(layers: int, device: torch.device):
    from transformers import LlamaForCausalLM

    config = llama_config(layers)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def raise_recompile_limits(limit: int = 256) -> None:
    """Dynamo compiles one graph per input shape (and per layer type, variant after variant); its
    per-function recompile limits are raised so that none of them falls back to eager."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), limit))


def swap_linears(model: torch.nn.Module, make: Callable[[torch.nn.Linear], torch.nn.Module],
                 skip: str = "lm_head") -> None:
    """Replaces every nn.Linear inside model but the one named `skip` by make(linear), in place."""
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear) and f"{parent_name}.{name}".lstrip(".") != skip:
                setattr(parent, name, make(child))


def variants() -> dict[str, Optional[Callable]]:
    import tcgemm

    out: dict[str, Optional[Callable]] = {
        "bf16": None,
        "tcgemm channel": lambda m: tcgemm.quantize_model(m, weight="channel", activation="token", skip=["lm_head"]),
        "tcgemm block": lambda m: tcgemm.quantize_model(m, weight="block", activation="block", skip=["lm_head"]),
        "tcgemm-w4a8": lambda m: tcgemm.quantize_model(m, skip=["lm_head"], scheme="w4a8"),
        "tcgemm-w4a8-fused": lambda m: (tcgemm.quantize_model(m, skip=["lm_head"], scheme="w4a8"),
                                        tcgemm.fuse_siblings(m)),
        "tcgemm-w4a8-group": lambda m: tcgemm.quantize_model(m, skip=["lm_head"], scheme="w4a8-group"),
        "tcgemm-w4a8-rot": lambda m: tcgemm.quantize_model(m, skip=["lm_head"],
                                                          scheme=dataclasses.replace(tcgemm.W4A8, rotate=True)),
        "torch-int4": lambda m: swap_linears(m, TorchInt4Linear.from_linear),
    }
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        def torchao_int8(m):
            quantize_(m, Int8DynamicActivationInt8WeightConfig(),
                      filter_fn=lambda mod, fqn: isinstance(mod, torch.nn.Linear) and "lm_head" not in fqn)

        def torchao_int8_compiled(m):
            torchao_int8(m)
            # Every quantized linear compiled (torch.compile's default mode): the activation
            # quantization, the int8 matmul and its scaling fused as torchao intends. One graph
            # per weight shape and input shape.
            raise_recompile_limits()
            for name, mod in m.named_modules():
                if isinstance(mod, torch.nn.Linear) and "lm_head" not in name:
                    mod.compile()

        out["torchao int8 dynamic"] = torchao_int8
        out["torchao int8 dynamic + compile"] = torchao_int8_compiled
    except Exception as e:  # not installed, or an API of another version
        print(f"bench_llm: torchao skipped ({type(e).__name__}: {e})")
    return out


def select_variants(known: dict[str, Optional[Callable]], spec: Optional[str]) -> dict[str, Optional[Callable]]:
    """The variants named in spec (comma-separated, in the order of `known`); all of them for None."""
    if not spec:
        return known
    return {name: known[name] for name in report.select_names(list(known), spec, "bench_llm: --variants")}


def projection_bytes_per_param(model: torch.nn.Module, skip: str = "lm_head") -> Optional[float]:
    """Bytes per weight of the model's projections: every module with in_features and out_features
    but the one named `skip`; a layer's bytes are its tensors but the bias (bench_decode.layer_bytes:
    the packed weight and every scale). A fused model's `FusedSlice` views (tcgemm.fuse_siblings) are
    left out: their weights are counted once, in the stacked layer. None for a model without such
    layers."""
    from tcgemm.fuse import FusedSlice

    nbytes = params = 0
    for name, mod in model.named_modules():
        if name.split(".")[-1] == skip or not (hasattr(mod, "in_features") and hasattr(mod, "out_features")):
            continue
        if isinstance(mod, FusedSlice):
            continue
        nbytes += layer_bytes(mod)
        params += mod.in_features * mod.out_features
    return nbytes / params if params else None


def random_ids(vocab: int, shape: tuple[int, ...], device) -> torch.Tensor:
    """Token ids drawn on the host: a CUDA graph capture that failed inside a variant leaves the
    device generator unusable for the variants after it."""
    return torch.randint(vocab, shape).to(device)


def time_ms(fn: Callable[[], Any], reps: int = 5, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


@functools.lru_cache(maxsize=None)
def _keywords(cls: type) -> tuple[str, Optional[str]]:
    """The names the model's forward gives the KV cache and the count of logits to keep, which
    differ between transformers versions; resolved once, so a compiled forward sees no retry."""
    params = inspect.signature(cls.forward).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    return cache, next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)


def forward(model, cache=None, **kwargs):
    """model(**kwargs) with the KV cache `cache` (if any), keeping the logits of the last position only."""
    cache_name, logits_name = _keywords(type(getattr(model, "_orig_mod", model)))
    if cache is not None:
        kwargs[cache_name] = cache
    if logits_name is not None:
        kwargs[logits_name] = 1
    return model(**kwargs)


def prefill_ms(model, device) -> float:
    ids = random_ids(model.config.vocab_size, (1, PREFILL_TOKENS), device)
    return time_ms(lambda: forward(model, input_ids=ids, use_cache=False))


def static_cache(config, batch: int, length: int, device):
    from transformers import StaticCache

    try:
        return StaticCache(config=config, max_cache_len=length)
    except TypeError:  # transformers 4.x
        return StaticCache(config=config, max_batch_size=batch, max_cache_len=length, device=device,
                           dtype=torch.bfloat16)


def kernel_summary(kernels: list[tuple[str, float, float]], top: int = 12) -> dict[str, Any]:
    """Kernels given as (name, start us, end us): their time in all, the span from the first
    start to the last end (so span minus time is when no kernel ran, where they do not overlap),
    and the `top` names that took most time (names cut at 100 characters), with their counts."""
    if not kernels:
        return {"kernels": 0, "kernel_us": 0.0, "span_us": 0.0, "top": []}
    by_name: dict[str, list[float]] = {}
    for name, start, end in kernels:
        by_name.setdefault(name[:100], []).append(end - start)
    ranked = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:top]
    return {"kernels": len(kernels), "kernel_us": sum(end - start for _, start, end in kernels),
            "span_us": max(end for _, _, end in kernels) - min(start for _, start, _ in kernels),
            "top": [{"name": name, "count": len(times), "us": sum(times)} for name, times in ranked]}


def decode(model, batch: int, context: int, device, step_model=None, profile: bool = False) -> dict[str, Any]:
    """Tokens per second of one decode step at position `context` with a static cache: the prompt
    run by `model`, the step by `step_model` (the model compiled, say; default `model`); with
    `profile`, one more step's kernels (kernel_summary)."""
    cache = static_cache(model.config, batch, context + 192, device)  # room for every step below
    ids = random_ids(model.config.vocab_size, (batch, context), device)
    forward(model, cache, input_ids=ids, use_cache=True, cache_position=torch.arange(context, device=device))
    token = random_ids(model.config.vocab_size, (batch, 1), device)
    position = torch.full((1,), context, device=device, dtype=torch.long)
    position_ids = position.view(1, 1).expand(batch, 1)
    step_model = model if step_model is None else step_model

    def step():
        return forward(step_model, cache, input_ids=token, use_cache=True, cache_position=position,
                       position_ids=position_ids)

    mode, run = "eager", step
    try:
        graph = timing.capture_graph(step)
        mode, run = "graph", graph.replay
    except Exception as e:
        print(f"bench_llm: CUDA graph capture failed at batch {batch} ({type(e).__name__}: {str(e)[:200]}); eager")
        torch.cuda.synchronize()
    steps = 20

    def burst():
        for _ in range(steps):
            run()

    ms = time_ms(burst) / steps
    rec = {"batch": batch, "mode": mode, "ms_per_step": ms, "tokens_per_s": batch / ms * 1e3}
    if profile:
        rec["profile"] = kernel_summary(timing.cuda_kernels(run))
    return rec


def measure(model, name: str, compiled: bool, args, device) -> dict[str, Any]:
    """One variant's record: its model run as it is or (compiled) under torch.compile."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    weights = sum(tensor_bytes(t) for t in itertools.chain(model.parameters(), model.buffers()))
    resident = torch.cuda.memory_allocated(device)  # this variant, and the bf16 model it was copied from
    torch.cuda.reset_peak_memory_stats(device)
    rec: dict[str, Any] = {"variant": name, "compiled": compiled, "weights_gib": weights / 2**30,
                           "proj_bytes_per_param": projection_bytes_per_param(model)}
    runner = model
    try:  # a variant that does not run is reported, not fatal
        if compiled:
            torch._dynamo.reset()  # the previous variant's graphs go, and its recompile counts
            raise_recompile_limits()
            runner = torch.compile(model, dynamic=False)
        if not args.no_prefill:
            rec["prefill_ms"] = prefill_ms(runner, device)
        rec["decode"] = []
        for b in args.batches:
            try:
                rec["decode"].append(decode(model, b, args.context, device, step_model=runner, profile=args.profile))
            except Exception as e:
                rec["decode"].append({"batch": b, "error": f"{type(e).__name__}: {str(e)[:300]}"})
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    # The variant alone: its weights plus what its runs allocated on top of everything resident.
    rec["peak_gib"] = (weights + torch.cuda.max_memory_allocated(device) - resident) / 2**30
    print(json.dumps(rec), flush=True)
    if compiled:
        del runner
        torch._dynamo.reset()
        gc.collect()
    return rec


def run(args) -> dict[str, Any]:
    device = torch.device("cuda", torch.cuda.current_device())
    meta = report.run_metadata(device, report.command_line("benchmarks.bench_llm", args.argv))
    chosen = select_variants(variants(), args.variants)
    base = build_model(args.layers, device)
    results = []
    with torch.no_grad():
        for name, convert in chosen.items():
            runs = [c for c in COMPILE[args.compile] if not (c and name in SELF_COMPILED)]
            if not runs:
                print(f"bench_llm: {name} compiles its own layers; it runs only with --compile off or both")
                continue
            model = base if convert is None else copy.deepcopy(base)
            try:
                if convert is not None:
                    convert(model)
            except Exception as e:  # a variant that cannot be built is reported, not fatal
                error = f"{type(e).__name__}: {str(e)[:300]}"
                failed = [{"variant": name, "compiled": c, "error": error} for c in runs]
                results += failed
                print(json.dumps(failed[0]), flush=True)
            else:
                results += [measure(model, name, compiled, args, device) for compiled in runs]
            if model is not base:
                del model
            gc.collect()
    return {"meta": meta, "layers": args.layers, "context": args.context,
            "prefill_tokens": 0 if args.no_prefill else PREFILL_TOKENS, "batches": list(args.batches),
            "results": results}


FOUR_BIT = {
    "tcgemm-w4a8": "`quantize_model(scheme=\"w4a8\")`, 4-bit weights with an fp32 scale per channel and int8 scales "
                   "per 128 inputs, int8 activations per token",
    "tcgemm-w4a8-fused": "`W4A8`, then `tcgemm.fuse_siblings`: q, k and v (and gate and up) of each block stacked "
                         "into one layer",
    "tcgemm-w4a8-group": "`scheme=\"w4a8-group\"`, 4-bit weights with fp32 scales per 128 inputs",
    "tcgemm-w4a8-rot": "`W4A8` with rotated inputs (`rotate=True`: x rotated per 128 features inside the activation "
    "quantization)",
    "torch-int4": "`torch.ops.aten._weight_int4pack_mm` (tinygemm) on bf16 activations, the weights as torchao's "
                  "`Int4WeightOnlyConfig` packs them (groups of 128, bf16 scales and zero points)",
}


def label(r: dict[str, Any]) -> str:
    return f"{r['variant']}, compiled" if r.get("compiled") else r["variant"]


def markdown(doc: dict[str, Any], command: Optional[str] = None) -> dict[str, str]:
    header = report.header_line(doc["meta"], command)
    batches = doc.get("batches", BATCHES)
    prefill = bool(doc.get("prefill_tokens"))
    # Ratios are to bf16 run the same way (compiled or not).
    bases = {bool(r.get("compiled")): r for r in doc["results"] if r["variant"] == "bf16" and "error" not in r}
    headers = ["variant"] + ([f"prefill {doc['prefill_tokens']} tok ms", "prefill vs bf16"] if prefill else [])
    headers += [f"decode tok/s, batch {b}" for b in batches]
    headers += ["proj. bytes/param", "weights GiB", "peak GiB"]
    rows, errors = [], []
    for r in doc["results"]:
        name = label(r)
        if "error" in r:
            errors.append(f"{name}: {r['error'][:160]}")
            rows.append([name, "error"] + ["-"] * (len(headers) - 2))
            continue
        base = bases.get(bool(r.get("compiled")))
        cells = [name]
        if prefill:
            ms, base_ms = r.get("prefill_ms"), (base or {}).get("prefill_ms")
            cells += ["-" if ms is None else f"{ms:.1f}", f"{base_ms / ms:.2f}x" if ms and base_ms else "-"]
        steps = {d["batch"]: d for d in r["decode"]}
        base_steps = {d["batch"]: d for d in base["decode"]} if base else {}
        for batch in batches:
            d, b = steps.get(batch), base_steps.get(batch)
            if d is None:
                cells.append("-")
                continue
            if "error" in d:
                errors.append(f"{name}, decode at batch {batch}: {d['error'][:160]}")
                cells.append("error")
                continue
            mark = "" if d["mode"] == "graph" else " (eager)"
            ratio = f" ({d['tokens_per_s'] / b['tokens_per_s']:.2f}x)" if b and "error" not in b else ""
            cells.append(f"{d['tokens_per_s']:.0f}{ratio}{mark}")
        per_param = r.get("proj_bytes_per_param")
        cells += ["-" if per_param is None else f"{per_param:.3f}", f"{r['weights_gib']:.1f}", f"{r['peak_gib']:.1f}"]
        rows.append(cells)
    legend = (f"A Llama-3-8B-shaped `LlamaForCausalLM` ({doc['layers']} layers, random bf16 weights, lm_head bf16 "
              "in every variant). "
              + (f"Prefill: one forward over {doc['prefill_tokens']} tokens, batch 1. " if prefill else "")
              + f"Decode: steps after a {doc['context']}-token prompt with a static KV cache, one step per CUDA graph "
              "replay; tokens/s = batch / step time, ratio to bf16 in parentheses. proj. bytes/param: the bytes of the "
              "decoder's projections (packed weights and every scale, no bias) per weight. Memory: the variant's "
              "weights, and its peak (the weights plus the most its runs allocated: KV caches, activations).")
    if any(r.get("compiled") for r in doc["results"]):
        legend += (" compiled: the model under `torch.compile` (default mode, static shapes), its decode step "
                   "captured in a CUDA graph as above; the prompt that fills the cache runs uncompiled; ratios "
                   "to bf16 compiled.")
    four_bit = [f"{v}: {text}" for v, text in FOUR_BIT.items() if any(r["variant"] == v for r in doc["results"])]
    if four_bit:
        legend += " " + "; ".join(four_bit) + "."
    if any(r["variant"].startswith("torchao") for r in doc["results"]):
        legend += (" torchao: `Int8DynamicActivationInt8WeightConfig` as `quantize_` leaves it (its path is "
                   "written for `torch.compile`), and with every quantized linear compiled by `torch.compile` "
                   "(default mode; the rest of the model runs as in the other variants).")
    if any(d.get("mode") == "eager" for r in doc["results"] for d in r.get("decode", [])):
        legend += " '(eager)': the step could not be captured in a CUDA graph and ran from Python."
    parts = ["## End to end: Llama-3-8B-shaped model", header, legend, report.markdown_table(headers, rows, align_left=1)]
    if errors:
        parts.append("Errors:\n\n" + "\n".join(f"- {e}" for e in errors))
    body = "\n\n".join(parts)
    return {"bench_llm": body}


def plot(doc: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: skipping the plot")
        return
    batches = doc.get("batches", BATCHES)
    prefill = bool(doc.get("prefill_tokens"))
    ok = [r for r in doc["results"] if "error" not in r and all("error" not in d for d in r["decode"])]
    fig, axes = plt.subplots(1, 2 if prefill else 1, figsize=(11 if prefill else 6, 4), squeeze=False)
    ax1 = axes[0][0]
    width = 0.8 / max(1, len(ok))
    for i, r in enumerate(ok):
        steps = {d["batch"]: d["tokens_per_s"] for d in r["decode"]}
        xs = [j + i * width for j, b in enumerate(batches) if b in steps]
        ax1.bar(xs, [steps[b] for b in batches if b in steps], width, label=label(r))
        if prefill:
            axes[0][1].bar([i], [r.get("prefill_ms", 0.0)], 0.6, label=label(r))
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(batches))], [f"batch {b}" for b in batches])
    ax1.set_ylabel("decode tokens / s")
    ax1.set_yscale("log")
    ax1.legend(fontsize=8)
    if prefill:
        axes[0][1].set_xticks(range(len(ok)), [label(r) for r in ok], rotation=15, fontsize=8)
        axes[0][1].set_ylabel(f"prefill {doc['prefill_tokens']} tokens, ms")
    meta = doc["meta"]
    fig.suptitle(f"Llama-3-8B-shaped, {doc['layers']} layers - {meta.get('device', '')} - {meta.get('date', '')[:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.bench_llm", description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=32, help="decoder layers (default 32, as Llama-3-8B)")
    p.add_argument("--context", type=int, default=512, help="decode position (default 512)")
    p.add_argument("--png", type=Path, default=None, help="write the plot here")
    p.add_argument("--variants", default=None,
                   help="comma-separated variant names to run (default: every variant that can run)")
    p.add_argument("--compile", choices=tuple(COMPILE), default="off",
                   help="run each variant's model under torch.compile: off (default), on, or both (each variant "
                   "without and with)")
    p.add_argument("--batches", type=int, nargs="+", default=list(BATCHES),
                   help=f"decode batch sizes (default: {' '.join(map(str, BATCHES))})")
    p.add_argument("--no-prefill", action="store_true", help=f"leave out the {PREFILL_TOKENS}-token prefill")
    p.add_argument("--profile", action="store_true",
                   help="add one decode step's kernels under torch.profiler to each decode record "
                   "(time, span, top kernels)")
    report.add_result_args(p, "bench_llm")
    args = p.parse_args(argv)
    if min(args.batches) < 1:
        p.error(f"--batches: batch sizes must be at least 1, got {args.batches}")
    args.argv = argv
    doc = report.result_doc(args, "bench_llm", run, needs=("transformers",))
    if doc is None:
        return 1
    if args.png:
        plot(doc, args.png)
    if args.markdown:
        report.update_markdown(args.markdown, markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""End to end: a Llama-3-8B-shaped LlamaForCausalLM in bf16, tcgemm W8A8 and torchao int8.

    python3 -m benchmarks.bench_llm [--layers 32] [--json PATH] [--png PATH] [--markdown docs/performance.md]
    python3 -m benchmarks.bench_llm --render RESULTS_JSON --markdown docs/performance.md

The model is built from a config (Llama-3-8B: hidden 4096, MLP 14336, 32 heads, 8 KV heads,
vocabulary 128256; all 32 layers by default) with random bf16 weights; transformers is an
optional import. Variants, one after the other on copies of the same model:

- bf16: the model as built;
- tcgemm channel: ``tcgemm.quantize_model`` (int8 weights per channel, activations per token);
- tcgemm block: 128x128 weight blocks, 1x128 activation groups;
- torchao: ``Int8DynamicActivationInt8WeightConfig`` when torchao is importable, as ``quantize_``
  leaves it and with every quantized linear compiled (``torch.compile``, default mode); at decode
  inside the same CUDA graphs where the step can be captured, else eager.

``--variants`` runs some of them (names as in the table, comma-separated).

The lm_head stays bf16 in every variant. Measured per variant:

- prefill: one forward over 2048 tokens (batch 1, no cache, logits of the last token), device
  events around the call, median of 5 after 2 warm-ups;
- decode: tokens per second at batch 1, 8 and 32: one decode step after a prompt of
  ``--context`` tokens, captured in a CUDA graph and replayed 20 times per round, median over 5
  rounds; each replay appends one position to the static KV cache (``--context`` + 192
  positions); "eager" in the JSON when the capture fails;
- GPU memory: the variant's weights (parameters and buffers), and its peak: the weights plus the
  most its runs (caches, activations, graphs) allocated on top.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from benchmarks import report

BATCHES = (1, 8, 32)
PREFILL_TOKENS = 2048


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


def variants() -> dict[str, Optional[Callable]]:
    import tcgemm

    out: dict[str, Optional[Callable]] = {
        "bf16": None,
        "tcgemm channel": lambda m: tcgemm.quantize_model(m, weight="channel", activation="token", skip=["lm_head"]),
        "tcgemm block": lambda m: tcgemm.quantize_model(m, weight="block", activation="block", skip=["lm_head"]),
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
            # per weight shape and input shape, so dynamo's per-function recompile limit is raised.
            cfg = torch._dynamo.config
            for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                          "accumulated_cache_size_limit"):
                if hasattr(cfg, limit):
                    setattr(cfg, limit, max(getattr(cfg, limit), 256))
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
    wanted = [v.strip() for v in spec.split(",") if v.strip()]
    unknown = [v for v in wanted if v not in known]
    if unknown or not wanted:
        raise ValueError(f"bench_llm: argument --variants names no variant or an unknown one ({unknown}); "
                         f"expected names among {list(known)}")
    return {k: v for k, v in known.items() if k in wanted}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's storage; for a wrapper subclass (torchao's quantized weights), of the
    tensors inside it, whose outer dtype is the float one it stands for."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        return sum(tensor_bytes(getattr(t, n)) for n in names)
    return t.numel() * t.element_size()


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


def forward(model, **kwargs):
    try:
        return model(**kwargs, logits_to_keep=1)
    except TypeError:  # transformers without logits_to_keep
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


def decode(model, batch: int, context: int, device) -> dict[str, Any]:
    """Tokens per second of one decode step at position `context` with a static cache."""
    cache = static_cache(model.config, batch, context + 192, device)  # room for every step below
    ids = random_ids(model.config.vocab_size, (batch, context), device)
    forward(model, input_ids=ids, past_key_values=cache, use_cache=True,
            cache_position=torch.arange(context, device=device))
    token = random_ids(model.config.vocab_size, (batch, 1), device)
    position = torch.full((1,), context, device=device, dtype=torch.long)
    position_ids = position.view(1, 1).expand(batch, 1)

    def step():
        return forward(model, input_ids=token, past_key_values=cache, use_cache=True, cache_position=position,
                       position_ids=position_ids)

    mode, run = "eager", step
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        mode, run = "graph", graph.replay
    except Exception as e:
        print(f"bench_llm: CUDA graph capture failed at batch {batch} ({type(e).__name__}: {str(e)[:200]}); eager")
        torch.cuda.synchronize()
    steps = 20

    def burst():
        for _ in range(steps):
            run()

    ms = time_ms(burst) / steps
    return {"batch": batch, "mode": mode, "ms_per_step": ms, "tokens_per_s": batch / ms * 1e3}


def run(args) -> dict[str, Any]:
    device = torch.device("cuda", torch.cuda.current_device())
    meta = report.run_metadata(device, report.command_line("benchmarks.bench_llm", args.argv))
    base = build_model(args.layers, device)
    results = []
    with torch.no_grad():
        for name, convert in select_variants(variants(), args.variants).items():
            model = base if convert is None else copy.deepcopy(base)
            if convert is not None:
                convert(model)
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
            weights = sum(tensor_bytes(t) for t in itertools.chain(model.parameters(), model.buffers()))
            resident = torch.cuda.memory_allocated(device)  # this variant, and the bf16 model it was copied from
            torch.cuda.reset_peak_memory_stats(device)
            rec: dict[str, Any] = {"variant": name, "weights_gib": weights / 2**30}
            try:  # a variant that does not run is reported, not fatal
                rec["prefill_ms"] = prefill_ms(model, device)
                rec["decode"] = []
                for b in BATCHES:
                    try:
                        rec["decode"].append(decode(model, b, args.context, device))
                    except Exception as e:
                        rec["decode"].append({"batch": b, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            # The variant alone: its weights plus what its runs allocated on top of everything resident.
            rec["peak_gib"] = (weights + torch.cuda.max_memory_allocated(device) - resident) / 2**30
            results.append(rec)
            print(json.dumps(rec), flush=True)
            if model is not base:
                del model
    return {"meta": meta, "layers": args.layers, "context": args.context, "prefill_tokens": PREFILL_TOKENS,
            "results": results}


def markdown(doc: dict[str, Any], command: Optional[str] = None) -> dict[str, str]:
    header = report.header_line(doc["meta"], command)
    base = next((r for r in doc["results"] if r["variant"] == "bf16" and "error" not in r), None)
    rows, errors = [], []
    for r in doc["results"]:
        if "error" in r:
            errors.append(f"{r['variant']}: {r['error'][:160]}")
            rows.append([r["variant"], "error"] + ["-"] * (len(BATCHES) + 3))
            continue
        cells = [r["variant"], f"{r['prefill_ms']:.1f}"]
        cells.append(f"{base['prefill_ms'] / r['prefill_ms']:.2f}x" if base else "-")
        for d, b in zip(r["decode"], base["decode"] if base else [None] * len(BATCHES)):
            if "error" in d:
                errors.append(f"{r['variant']}, decode at batch {d['batch']}: {d['error'][:160]}")
                cells.append("error")
                continue
            mark = "" if d["mode"] == "graph" else " (eager)"
            ratio = f" ({d['tokens_per_s'] / b['tokens_per_s']:.2f}x)" if b and "error" not in b else ""
            cells.append(f"{d['tokens_per_s']:.0f}{ratio}{mark}")
        cells += [f"{r['weights_gib']:.1f}", f"{r['peak_gib']:.1f}"]
        rows.append(cells)
    headers = ["variant", f"prefill {doc['prefill_tokens']} tok ms", "prefill vs bf16"]
    headers += [f"decode tok/s, batch {b}" for b in BATCHES]
    headers += ["weights GiB", "peak GiB"]
    legend = (f"A Llama-3-8B-shaped `LlamaForCausalLM` ({doc['layers']} layers, random bf16 weights, lm_head bf16 "
              f"in every variant). Prefill: one forward over {doc['prefill_tokens']} tokens, batch 1. Decode: steps "
              f"after a {doc['context']}-token prompt with a static KV cache, one step per CUDA graph replay; "
              "tokens/s = batch / step time, ratio to bf16 in parentheses. Memory: the variant's weights, and its peak (the weights plus "
              "the most its runs allocated: KV caches, activations).")
    if any(r["variant"].startswith("torchao") for r in doc["results"]):
        legend += (" torchao: `Int8DynamicActivationInt8WeightConfig` as `quantize_` leaves it (its path is "
                   "written for `torch.compile`), and with every quantized linear compiled by `torch.compile` "
                   "(default mode; the rest of the model runs as in the other variants). '(eager)': the step "
                   "could not be captured in a CUDA graph and ran from Python.")
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
    ok = [r for r in doc["results"] if "error" not in r and all("error" not in d for d in r["decode"])]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / max(1, len(ok))
    for i, r in enumerate(ok):
        xs = [j + i * width for j in range(len(BATCHES))]
        ax1.bar(xs, [d["tokens_per_s"] for d in r["decode"]], width, label=r["variant"])
        ax2.bar([i], [r["prefill_ms"]], 0.6, label=r["variant"])
    ax1.set_xticks([j + 0.4 - width / 2 for j in range(len(BATCHES))], [f"batch {b}" for b in BATCHES])
    ax1.set_ylabel("decode tokens / s")
    ax1.set_yscale("log")
    ax1.legend(fontsize=8)
    ax2.set_xticks(range(len(ok)), [r["variant"] for r in ok], rotation=15, fontsize=8)
    ax2.set_ylabel(f"prefill {doc['prefill_tokens']} tokens, ms")
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
    report.add_result_args(p, "bench_llm")
    args = p.parse_args(argv)
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

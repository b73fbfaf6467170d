"""Checkpoints at their compressed size: a Llama-3-8B-shaped model saved as W4A8 compressed-tensors
in shards and loaded from the meta device, its bf16 checkpoint quantized on load through
transformers, and generate() of the loaded model against bf16.

    python3 -m benchmarks.bench_load [--layers 32] [--workdir DIR] [--shard 5GB] [--compile {on,off}]
                                     [--profile] [--json PATH] [--markdown docs/performance.md]
    python3 -m benchmarks.bench_load --render RESULTS_JSON --markdown docs/performance.md

Steps (transformers needed), each measurement in a process of its own so that its peaks are its own:

1. checkpoints: a ``LlamaForCausalLM`` built from Llama-3-8B's config (``--layers`` decoder
   layers, random bf16 weights, seeded) is saved with ``save_pretrained`` in shards of ``--shard``
   (bf16), then quantized with ``tcgemm.quantize_model(scheme="w4a8")`` (lm_head left bf16) and
   saved with ``tcgemm.compressed.save_compressed`` in shards of the same size, under ``--workdir``
   (default: a temporary folder, removed at the end);
2. load: ``tcgemm.compressed.from_pretrained(w4a8_folder, device=...)``, which builds the model on
   the meta device and streams the shards tensor by tensor: its seconds, its peak CUDA memory
   (``torch.cuda.max_memory_allocated``) over the loaded model's bytes (parameters and buffers),
   and its peak host memory (the process's resident set, VmHWM, reset before the load) above the
   resident set before it;
3. quantize on load: ``AutoModelForCausalLM.from_pretrained(bf16_folder,
   quantization_config=tcgemm.hf.TcgemmConfig("w4a8"), dtype=torch.bfloat16, device_map=...)``:
   the same figures, the peak CUDA memory also as the bytes above the quantized model's;
4. generate: the bf16 model (``from_pretrained``) and the W4A8 one (step 2's load), in turn in
   one process: greedy ``generate()`` of ``--new-tokens`` tokens after a 32-token prompt of random
   ids, batch 1, static KV cache, the decode step compiled by transformers with CUDA graphs
   (``--compile on``, the default; ``examples.hf_llm.timed_generate``); tokens per second of
   the second of two runs; the same for the architecture with one decoder layer (the floor per
   token); with ``--profile``, a third run of each under torch.profiler (wall and device time
   per token, the events that took the most).

The bars this checks (the issue's): peak CUDA memory of the load at most 1.15x the quantized model,
peak host memory at most 6 GB above the start; quantize on load at most the quantized size + 2 GB;
W4A8 generate at least 1.8x bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import torch

from benchmarks import report

# Llama-3-8B's shapes (benchmarks.bench_llm's), and a tiny model of the same architecture for tests.
LLAMA_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False)
TINY = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
            max_position_embeddings=512, tie_word_embeddings=False)
SCHEME = "w4a8"
PROMPT_TOKENS = 32
GiB = 2**30


def _status_kib(field: str) -> Optional[int]:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in KiB; None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class HostPeak:
    """The process's peak resident set above its resident set at construction: VmHWM, reset first
    (``/proc/self/clear_refs``), where Linux gives them; None elsewhere."""

    def __init__(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current resident set
            self.reset = True
        except OSError:
            self.reset = False
        self.start = _status_kib("VmRSS")

    def bytes_above_start(self) -> Optional[int]:
        peak = _status_kib("VmHWM")
        if not self.reset or peak is None or self.start is None:
            return None
        # Linux updates the counters behind VmRSS and VmHWM lazily (per thread, some pages at a
        # time): a step that allocates nothing can read a few hundred KiB below its start.
        return max(peak - self.start, 0) * 1024


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes of a model's parameters and buffers, each storage once (tied weights)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def folder_bytes(path: str) -> tuple[int, int]:
    """Bytes of a folder's safetensors files, and how many there are."""
    files = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    return sum(os.path.getsize(os.path.join(path, f)) for f in files), len(files)


def _placement(device: torch.device) -> dict[str, str]:
    """from_pretrained's keywords that put a model on ``device`` (device_map needs accelerate; a
    model on the CPU needs none)."""
    return {} if device.type == "cpu" else {"device_map": str(device)}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_checkpoints(workdir: str, layers: int, shape: dict[str, Any], device: torch.device,
                     shard: str) -> dict[str, Any]:
    """Step 1: the bf16 and the W4A8 checkpoints in ``workdir``/bf16 and ``workdir``/w4a8."""
    import transformers

    import tcgemm
    import tcgemm.compressed

    config = transformers.LlamaConfig(num_hidden_layers=layers, **shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    bf16_dir, w4_dir = os.path.join(workdir, "bf16"), os.path.join(workdir, "w4a8")
    model.save_pretrained(bf16_dir, max_shard_size=shard)
    tcgemm.quantize_model(model, scheme=SCHEME, skip=["lm_head"])
    model.config.save_pretrained(w4_dir)
    tcgemm.compressed.save_compressed(model, w4_dir, max_shard_size=shard)
    (bf16_bytes, bf16_files), (w4_bytes, w4_files) = folder_bytes(bf16_dir), folder_bytes(w4_dir)
    return {"bf16_dir": bf16_dir, "w4a8_dir": w4_dir, "bf16_bytes": bf16_bytes, "bf16_files": bf16_files,
            "w4a8_bytes": w4_bytes, "w4a8_files": w4_files, "quantized_model_bytes": model_bytes(model)}


def _peaks(device: torch.device, host: HostPeak, model: torch.nn.Module, seconds: float) -> dict[str, Any]:
    size = model_bytes(model)
    out = {"seconds": seconds, "model_bytes": size, "host_peak_bytes": host.bytes_above_start()}
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        out.update(cuda_peak_bytes=peak, cuda_peak_over_model=peak / size)
    return out


def measure_load(w4_dir: str, device: torch.device) -> dict[str, Any]:
    """Step 2: the W4A8 checkpoint loaded from the meta device."""
    import tcgemm.compressed

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    host = HostPeak()
    start = time.perf_counter()
    model = tcgemm.compressed.from_pretrained(w4_dir, device=device, dtype=torch.bfloat16)
    _sync(device)
    return _peaks(device, host, model, time.perf_counter() - start)


def measure_quantize_on_load(bf16_dir: str, device: torch.device, quantized_bytes: int) -> dict[str, Any]:
    """Step 3: the bf16 checkpoint quantized to W4A8 as it loads, through transformers."""
    import transformers

    import tcgemm.hf

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    host = HostPeak()
    start = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        bf16_dir, quantization_config=tcgemm.hf.TcgemmConfig(SCHEME), dtype=torch.bfloat16, **_placement(device))
    _sync(device)
    out = _peaks(device, host, model, time.perf_counter() - start)
    if "cuda_peak_bytes" in out:
        out["cuda_peak_above_quantized_bytes"] = out["cuda_peak_bytes"] - quantized_bytes
    return out


def generate_profile(model, ids: torch.Tensor, new_tokens: int, compile_forward: bool) -> dict[str, Any]:
    """One more generate() (as timed) under torch.profiler: per token its wall time and the time the
    device's events took (kernels, copies and fills on a GPU; operators on the CPU), and the
    events that took the most, so that a run shows whether the time between the decode steps is
    the host's or the device's."""
    from torch.profiler import ProfilerActivity, profile

    from examples.hf_llm import generate_kwargs

    cuda = ids.is_cuda
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    with torch.no_grad(), profile(activities=[activity]) as prof:
        start = time.perf_counter()
        model.generate(ids, **generate_kwargs(ids, new_tokens, compile_forward))
        _sync(ids.device)
        wall = time.perf_counter() - start
    totals: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type == kind:
            total = totals.setdefault(e.name, [0, 0.0])
            total[0] += 1
            total[1] += e.time_range.end - e.time_range.start
    busy_us = sum(t for _, t in totals.values())
    top = sorted(totals.items(), key=lambda item: -item[1][1])[:8]
    return {"wall_ms_per_token": 1e3 * wall / new_tokens, "device_ms_per_token": busy_us / 1e3 / new_tokens,
            "top": [{"name": name[:100], "count": count, "us": us} for name, (count, us) in top]}


def tokens_per_second(model, vocab: int, device: torch.device, new_tokens: int, compile_forward: bool,
                      profile: bool = False) -> dict:
    """Greedy generate() after a random prompt, batch 1, static cache: tokens/s of the second run
    (``examples.hf_llm.timed_generate``: compiled, the decode step in CUDA graphs on a GPU); with
    ``profile``, a third run's profile (:func:`generate_profile`)."""
    from torch._dynamo.utils import counters

    from examples.hf_llm import timed_generate

    ids = torch.randint(0, vocab, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0)).to(device)
    def compile_counts() -> dict[str, int]:
        # what torch.compile made of the run: graphs compiled, graph breaks, and graphs it declined
        # to capture in CUDA graphs (0 where the decode step ran in graphs)
        return {"graphs_compiled": counters["stats"]["unique_graphs"],
                "graph_breaks": sum(counters["graph_break"].values()),
                "cudagraph_skips": counters["inductor"]["cudagraph_skips"]}

    before = compile_counts()
    out, rate = timed_generate(model, ids, new_tokens, compile_forward)
    after = compile_counts()
    rec = {"tokens_per_s": rate, "new_tokens": int(out.shape[1] - ids.shape[1]),
           **{key: after[key] - before[key] for key in after}}
    if profile:
        rec["profile"] = generate_profile(model, ids, new_tokens, compile_forward)
    return rec


def measure_generate(bf16_dir: str, w4_dir: str, device: torch.device, new_tokens: int,
                     compile_forward: bool, profile: bool = False) -> dict[str, Any]:
    """Step 4: generate() of the bf16 model and of the loaded W4A8 one, in turn (with ``profile``,
    each one's profile as well)."""
    import transformers

    import tcgemm.compressed

    bf16 = transformers.AutoModelForCausalLM.from_pretrained(bf16_dir, dtype=torch.bfloat16,
                                                             **_placement(device)).eval()
    vocab = bf16.config.vocab_size
    out = {"bf16": tokens_per_second(bf16, vocab, device, new_tokens, compile_forward, profile)}
    del bf16
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()
    w4 = tcgemm.compressed.from_pretrained(w4_dir, device=device, dtype=torch.bfloat16)
    out[SCHEME] = tokens_per_second(w4, vocab, device, new_tokens, compile_forward, profile)
    out["speedup"] = out[SCHEME]["tokens_per_s"] / out["bf16"]["tokens_per_s"]
    out["compile"] = compile_forward
    del w4
    if device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()
    # The same generate() of the architecture with one decoder layer: what a token costs with
    # almost no weights to read (the host's loop, the embedding and lm_head), the floor under
    # both models' time per token.
    config = transformers.AutoConfig.from_pretrained(bf16_dir)
    config.num_hidden_layers = 1
    torch.manual_seed(0)
    with torch.device(device):
        one = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    out["one_layer"] = tokens_per_second(one, vocab, device, new_tokens, compile_forward, profile)
    return out


def _in_process(step: str, args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    if step == "load":
        return measure_load(args.w4a8_dir, device)
    if step == "quantize_on_load":
        return measure_quantize_on_load(args.bf16_dir, device, args.quantized_bytes)
    return measure_generate(args.bf16_dir, args.w4a8_dir, device, args.new_tokens, args.compile == "on",
                            args.profile)


def _subprocess(step: str, ckpt: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One measurement step in a fresh process (its last stdout line: the step's JSON)."""
    cmd = [sys.executable, "-m", "benchmarks.bench_load", "--step", step, "--device", args.device,
           "--bf16-dir", ckpt["bf16_dir"], "--w4a8-dir", ckpt["w4a8_dir"],
           "--quantized-bytes", str(ckpt["quantized_model_bytes"]), "--new-tokens", str(args.new_tokens),
           "--compile", args.compile] + (["--profile"] if args.profile else [])
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench_load: step {step} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> dict[str, Any]:
    device = torch.device(args.device)
    workdir = args.workdir or tempfile.mkdtemp(prefix="tcgemm_bench_load_")
    try:
        ckpt = make_checkpoints(workdir, args.layers, LLAMA_8B, device, args.shard)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"checkpoints: {json.dumps(ckpt)}", file=sys.stderr, flush=True)
        steps = {}
        for step in ("load", "quantize_on_load", "generate"):
            steps[step] = _subprocess(step, ckpt, args)
            print(f"{step}: {json.dumps(steps[step])}", file=sys.stderr, flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return {"meta": report.run_metadata(device, report.command_line("benchmarks.bench_load", args.argv)),
            "layers": args.layers, "shard": args.shard, "checkpoints": ckpt, **steps}


def _gb(b: Optional[float]) -> str:
    return "-" if b is None else f"{b / 1e9:.2f} GB"


def markdown(doc: dict[str, Any], command: Optional[str] = None) -> dict[str, str]:
    meta, ck, load, qol, gen = doc["meta"], doc["checkpoints"], doc["load"], doc["quantize_on_load"], doc["generate"]
    rows = [
        ["W4A8 checkpoint (compressed-tensors)", f"{ck['w4a8_files']} files, {_gb(ck['w4a8_bytes'])} (bf16: "
         f"{ck['bf16_files']}, {_gb(ck['bf16_bytes'])}); the loaded model {_gb(ck['quantized_model_bytes'])}", ""],
        ["load from the meta device: time", f"{load['seconds']:.1f} s", ""],
        ["load: peak CUDA memory", f"{_gb(load.get('cuda_peak_bytes'))}, "
         f"{load.get('cuda_peak_over_model', float('nan')):.3f}x the loaded model", "<= 1.15x"],
        ["load: peak host memory above the start", _gb(load["host_peak_bytes"]), "<= 6 GB"],
        ["quantize on load (transformers, bf16 checkpoint): time", f"{qol['seconds']:.1f} s", ""],
        ["quantize on load: peak CUDA memory", f"{_gb(qol.get('cuda_peak_bytes'))}, "
         f"{_gb(qol.get('cuda_peak_above_quantized_bytes'))} above the quantized model", "<= + 2 GB"],
        ["generate(), batch 1, static cache" + (", torch.compile, CUDA graphs" if gen["compile"] else ""),
         f"bf16 {gen['bf16']['tokens_per_s']:.1f} tok/s, W4A8 {gen[SCHEME]['tokens_per_s']:.1f} tok/s "
         f"({gen['speedup']:.2f}x)", ">= 1.8x"],
    ]
    if "one_layer" in gen:
        rows.append(["generate() of the same model with one decoder layer (the floor per token)",
                     f"{gen['one_layer']['tokens_per_s']:.1f} tok/s, {1e3 / gen['one_layer']['tokens_per_s']:.2f} "
                     "ms a token", ""])
    text = "\n".join([
        "## Checkpoints at their compressed size: Llama-3-8B-shaped, W4A8",
        "",
        report.header_line(meta, command),
        "",
        f"A `LlamaForCausalLM` of Llama-3-8B's shapes ({doc['layers']} layers, random bf16 weights, lm_head bf16), "
        f"saved in shards of {doc['shard']}; each measurement in a process of its own. Peak host memory: the "
        "resident set's high-water mark (reset before the step) above the resident set before it.",
        "",
        report.markdown_table(["", "measured", "bar"], rows, align_left=3),
    ])
    return {"bench_load": text}


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.bench_load", description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=32, help="decoder layers (default 32, as Llama-3-8B)")
    p.add_argument("--workdir", default=None, help="where the checkpoints go (default: a temporary folder)")
    p.add_argument("--shard", default="5GB", help="max_shard_size of both checkpoints (default 5GB)")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens generate() makes (default 64)")
    p.add_argument("--compile", choices=("on", "off"), default="on", help="generate() under torch.compile")
    p.add_argument("--profile", action="store_true",
                   help="profile one more generate() of each model: per token its wall and device time, and "
                        "the events that took the most (in the JSON)")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    # one measurement step in this process (what the run starts in a fresh process per step)
    p.add_argument("--step", choices=("load", "quantize_on_load", "generate"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--bf16-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--w4a8-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--quantized-bytes", type=int, default=0, help=argparse.SUPPRESS)
    report.add_result_args(p, "bench_load")
    args = p.parse_args(argv)
    args.argv = argv
    if args.step:
        print(json.dumps(_in_process(args.step, args)))
        return 0
    doc = report.result_doc(args, "bench_load", run, needs=("transformers", "compressed_tensors"))
    if doc is None:
        return 1
    if args.markdown:
        report.update_markdown(args.markdown, markdown(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

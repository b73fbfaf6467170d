"""A transformers causal LM quantized to W4A8 as it loads, generating text, saved and reloaded.

    python3 -m examples.hf_llm meta-llama/Llama-3.2-1B          # a model id (needs the hub) or a local folder
    python3 -m examples.hf_llm path/to/llama --scheme w8a8 --max-new-tokens 64 --out llama-w8a8

Loads the model twice from its float checkpoint: in bf16 (the baseline) and with
``quantization_config=tcgemm.hf.TcgemmConfig(scheme)``, which quantizes each projection as its
weight arrives (transformers shows a progress bar while it loads and quantizes). Both generate
greedily from the same prompt with a static KV cache; the script prints the texts and their
tokens per second. Then it saves the quantized model (a compressed-tensors checkpoint), loads it
back at its compressed size with ``tcgemm.compressed.from_pretrained``, and checks that the
reloaded model generates the same tokens. ``--compile`` runs the decode step under
``torch.compile`` (on a GPU with CUDA graphs: :func:`timed_generate`). ``--fuse`` stacks each
block's q/k/v and gate/up projections into one layer (``TcgemmConfig(fuse=True)``, then
``tcgemm.fuse_siblings`` for the reloaded model); the checkpoint holds them apart. A folder
without a tokenizer gets a prompt of random token ids.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import torch


def generate_kwargs(ids, new_tokens: int, compile_step: bool) -> dict:
    """generate()'s arguments for greedy tokens after ``ids`` with a static KV cache.
    ``compile_step``: on a GPU, transformers compiles the decode step itself with CUDA graphs
    (``CompileConfig(mode="reduce-overhead")``; the prompt runs eager); elsewhere transformers'
    compilation is off (:func:`timed_generate` compiles the forward on the CPU)."""
    import transformers

    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  cache_implementation="static")
    if compile_step and ids.is_cuda:
        kwargs["compile_config"] = transformers.CompileConfig(mode="reduce-overhead", dynamic=False)
    else:
        kwargs["disable_compile"] = True
    return kwargs


def timed_generate(model, ids, new_tokens: int, compile_step: bool) -> tuple[torch.Tensor, float]:
    """Greedy tokens after ``ids`` with a static KV cache (:func:`generate_kwargs`), and tokens per
    second (the second of two runs timed). ``compile_step``: on a GPU, transformers compiles the
    decode step itself with CUDA graphs; on the CPU, which has no graphs, the forward runs under
    ``torch.compile``. Without it generate() runs eager."""
    kwargs = generate_kwargs(ids, new_tokens, compile_step)
    if compile_step and not ids.is_cuda:
        model.forward = torch.compile(model.forward)
    with torch.no_grad():
        model.generate(ids, **kwargs)  # warm-up (and compilation)
        if ids.is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(ids, **kwargs)
        if ids.is_cuda:
            torch.cuda.synchronize()
    return out, ids.shape[0] * new_tokens / (time.perf_counter() - start)


def main(argv=None) -> int:
    import transformers

    import tcgemm.compressed
    import tcgemm.hf

    p = argparse.ArgumentParser(prog="python3 -m examples.hf_llm", description=__doc__.splitlines()[0])
    p.add_argument("model", help="a transformers causal LM: hub id or local folder")
    p.add_argument("--scheme", default="w4a8", help="a tcgemm preset with dynamic activations (default w4a8)")
    p.add_argument("--prompt", default="The fastest way to multiply two int8 matrices on a GPU is")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--out", default="tcgemm-quantized", help="where the quantized checkpoint is saved")
    p.add_argument("--compile", action="store_true", help="decode under torch.compile")
    p.add_argument("--fuse", action="store_true", help="q/k/v and gate/up stacked (tcgemm.fuse_siblings)")
    args = p.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
        ids = tokenizer(args.prompt, return_tensors="pt").input_ids.to(device)
    except (OSError, ValueError):
        tokenizer = None
        vocab = transformers.AutoConfig.from_pretrained(args.model).vocab_size
        ids = torch.randint(0, vocab, (1, 12), generator=torch.Generator().manual_seed(0)).to(device)

    def text(tokens):
        return tokenizer.decode(tokens[0, ids.shape[1]:]) if tokenizer else tokens[0, ids.shape[1]:].tolist()

    results = {}
    for label, extra in (("bf16" if device == "cuda" else "fp32", {}),
                         (args.scheme,
                          {"quantization_config": tcgemm.hf.TcgemmConfig(args.scheme, fuse=args.fuse)})):
        # With accelerate, each weight is read onto the GPU and quantized there; without, on the CPU.
        placement = {"device_map": device} if importlib.util.find_spec("accelerate") else {}
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, **placement,
                                                                  **extra).to(device).eval()
        out, rate = timed_generate(model, ids, args.max_new_tokens, args.compile)
        results[label] = (out, rate)
        print(f"{label:>8}: {rate:8.1f} tokens/s  {text(out)!r}")
        if extra:
            model.save_pretrained(args.out)  # stacked layers (--fuse) are written apart
        del model
    base_rate = next(iter(results.values()))[1]
    print(f"{args.scheme} / {next(iter(results))}: {results[args.scheme][1] / base_rate:.2f}x tokens per second")

    reloaded = tcgemm.compressed.from_pretrained(args.out, device=device, dtype=dtype)
    if args.fuse:
        tcgemm.fuse_siblings(reloaded)
    out, rate = timed_generate(reloaded, ids, args.max_new_tokens, args.compile)
    same = torch.equal(out, results[args.scheme][0])
    print(f"reloaded from {args.out}: {rate:8.1f} tokens/s, {'the same' if same else 'other'} tokens")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

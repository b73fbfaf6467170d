"""How close the 4-bit decode layers come to a plain read of their bytes.

    python3 -m benchmarks.bench_stream_floor [--layers 8B_o,70B_down] [--rows 1]

For each decode layer of ``bench_decode`` (K -> N): the time of a read-only kernel over as many
bytes as the W4A8 layer holds (the packed weight, its int8 group scales and fp32 channel scales),
timed like the layers, in the same rounds as bf16 ``F.linear``, ``QuantLinear(scheme="w4a8")``
and torch's int4 weight-only kernel (CUDA graphs, copies rotated past the L2, methods
interleaved; ``bench_decode.time_methods``). The read-only kernel (Triton: each program sums a
contiguous slice of int32 words, loads past L1, and writes one word) is the best of a few slice
sizes and warp counts, each timed as a method of its own. ``bf16 / floor`` is then the most a
4-bit layer that only reads its bytes could gain over bf16 on this GPU; ``w4a8 / floor`` how far
the layer is from that. Needs Triton and a CUDA device.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch

from benchmarks.bench_decode import layer_bench_args, make_methods, time_methods

# (words per program, words per load step, warps): the read-only kernel's configurations.
CONFIGS = [(per, 1024, warps) for per, warps in itertools.product((2048, 4096, 8192, 16384), (4, 8))]


def read_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def read_words(ptr, out, per_prog: tl.constexpr, block: tl.constexpr):
        base = tl.program_id(0).to(tl.int64) * per_prog
        acc = tl.zeros([block], dtype=tl.int32)
        for i in range(0, per_prog, block):
            acc += tl.load(ptr + base + i + tl.arange(0, block), cache_modifier=".cg")
        tl.store(out + tl.program_id(0), tl.sum(acc, axis=0))

    return read_words


def floor_methods(nbytes: int, n_sets: int, device) -> dict:
    """One method per configuration, each reading its own n_sets buffers of nbytes (rounded up to
    whole programs)."""
    kernel = read_kernel()
    fns = {}
    for per, block, warps in CONFIGS:
        programs = -(-nbytes // (4 * per))
        bufs = [torch.ones(programs * per, dtype=torch.int32, device=device) for _ in range(n_sets)]
        out = torch.empty(programs, dtype=torch.int32, device=device)
        fns[f"floor/{per}/{block}/{warps}"] = (
            lambda i, bufs=bufs, out=out, per=per, block=block, warps=warps, programs=programs:
            kernel[(programs,)](bufs[i], out, per, block, num_warps=warps))
    return fns


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1, help="rows of x (default 1)")
    parsed = layer_bench_args(p, argv, "bench_stream_floor", None, "its seven Llama-3 layers")
    if parsed is None:
        return 1
    args, layers, device = parsed
    print(f"# {torch.cuda.get_device_name(device)}, M = {args.rows}, us per layer (CUDA graphs)")
    print("| layer | bytes (4-bit) | floor us | bf16 us | W4A8 us | torch int4 us | bf16 / floor | W4A8 / floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, k, n in layers:
        ms = make_methods(k, n, args.rows, device, ("bf16", "w4a8", "torch_int4"))
        nbytes = ms.layer_bytes["w4a8"]
        fns = dict(ms.fns)
        fns.update(floor_methods(nbytes, ms.n_sets, device))
        t = time_methods(fns, ms.n_sets, True)
        floor = min(v for m, v in t.items() if m.startswith("floor/"))
        print(f"| {name} | {nbytes / 1e6:.1f} MB | {floor:.1f} | {t['bf16']:.1f} | {t['w4a8']:.1f} | "
              f"{t['torch_int4']:.1f} | {t['bf16'] / floor:.2f}x | {t['w4a8'] / floor:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

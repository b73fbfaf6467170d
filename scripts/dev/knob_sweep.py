"""A/B/... of a launch-time setting in one process, for a development build whose launcher reads
the setting from an environment variable (added for the experiment; the library reads none):
each value's layers captured as their own CUDA graphs and timed interleaved, as bench_decode times
its methods, plus, with --kernels, the kernels of one eager call per value (torch.profiler).

    python3 -m scripts.dev.knob_sweep --env TCGEMM_W4_LOAD_GROUP --values 1,2,4 \
        --method w4a8 --layers 8B_gate+up,8B_down --rows 32 64 128 [--json PATH]

The value is set on the host while the calls are captured, so a graph keeps the launch it saw.
How docs/design/int4.md's W4 issue order and overlapped launch were measured.
"""
import argparse
import json
import os
import sys

import torch

from benchmarks import bench_decode, timing


def with_env(env: str, value: str, fn):
    def call(i):
        os.environ[env] = value
        return fn(i)
    return call


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="knob_sweep")
    p.add_argument("--env", required=True)
    p.add_argument("--values", required=True, help="comma-separated values of the variable")
    p.add_argument("--method", default="w4a8", help="a bench_decode method")
    p.add_argument("--layers", default="8B_gate+up,8B_down,70B_qkv")
    p.add_argument("--rows", type=int, nargs="+", default=[32, 64, 128])
    p.add_argument("--kernels", action="store_true", help="also list one eager call's kernels per value")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    values = args.values.split(",")
    dev = torch.device("cuda")
    records = []
    print(f"{torch.cuda.get_device_name(dev)}; {args.env} in {values}; us per layer (graph, median of rounds)")
    for name, k, n in bench_decode.select_layers(args.layers, False):
        weights = bench_decode.build_weights(k, n, dev, (args.method,))
        for m in args.rows:
            made = bench_decode.make_methods(k, n, m, dev, (args.method,), weights)
            base = made.fns[args.method]
            fns = {v: with_env(args.env, v, base) for v in values}
            us = bench_decode.time_methods(fns, made.n_sets, graphs=True)
            rec = {"layer": name, "k": k, "n": n, "m": m, "us": us}
            text = "  ".join(f"{v}={us[v]:7.2f}" for v in values)
            rel = "  ".join(f"{v}/{values[0]}={us[v] / us[values[0]]:.3f}" for v in values[1:])
            print(f"{name:>11} M={m:<4} {text}   {rel}", flush=True)
            if args.kernels:
                rec["kernels"] = {}
                for v in values:
                    os.environ[args.env] = v
                    ks = timing.cuda_kernels(lambda: base(0))
                    rec["kernels"][v] = [(kn[:60], round(e - s, 2)) for kn, s, e in ks]
                    print("      " + v + ": " + ", ".join(f"{kn[:40]} {t}" for kn, t in rec["kernels"][v]))
            records.append(rec)
            del made, fns, base
        del weights
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

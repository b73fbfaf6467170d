"""Interleaved timing of int8_gemm vs scaled_gemm (per-token x per-channel, bf16 out, bias) and peers.

    python3 tools/ab_scaled.py [rounds]
Each round times every method in a burst (rotated input sets, per-call device events), in a
rotated order, so clock drift over the run hits every method alike. Median over all calls.
"""

import statistics
import sys

import torch

import tcgemm

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (2048, 28672, 8192),
          (2048, 14336, 4096), (2048, 4096, 14336)]


def make_sets(m, n, k, n_sets):
    sets = []
    for _ in range(n_sets):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda") * 0.02
        qw, sw = tcgemm.quantize(w, "token")
        qx, sx = tcgemm.quantize(x, "token")
        qxb, sxb = tcgemm.quantize(x, "group")
        swb = w.abs().reshape(n // 128, 128, k // 128, 128).amax(dim=(1, 3)) / 127
        amax_x = x.abs().amax(dim=1, keepdim=True).float()
        amax_w = w.abs().amax(dim=1, keepdim=True).float()
        sets.append(dict(x=x, qx=qx, sx=sx, qxb=qxb, sxb=sxb, swb=swb.float().contiguous(), qwt=qw.t(), sw=sw.reshape(-1), bias=torch.randn(n, device="cuda") * 0.1,
                         fx=(x.float() / (amax_x / 448)).to(torch.float8_e4m3fn),
                         fwt=(w / (amax_w / 448)).to(torch.float8_e4m3fn).t(), fsx=amax_x / 448,
                         fsw=(amax_w / 448).reshape(1, -1), wt=w.to(torch.bfloat16).t()))
    return sets


def burst_ms(fn, n_sets, calls):
    """Device times (ms) of `calls` back-to-back calls on rotated input sets, queued behind a GPU sleep."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    torch.cuda._sleep(20_000_000)
    for c in range(calls):
        ev[c][0].record()
        fn(c % n_sets)
        ev[c][1].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in ev]


def median_burst_ms(fn, n_sets, calls, warmup):
    """Median device time (ms) of one call: `warmup` calls, then one burst_ms burst of `calls`."""
    for i in range(warmup):
        fn(i % n_sets)
    torch.cuda.synchronize()
    return statistics.median(burst_ms(fn, n_sets, calls))


def e2e(s):
    qx, sx = tcgemm.quantize(s["x"], "token")
    return tcgemm.scaled_gemm(qx, s["qwt"], sx, s["sw"], s["bias"])


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    for (m, n, k) in SHAPES:
        n_sets = 3
        S = make_sets(m, n, k, n_sets)
        ref = (S[0]["qx"].double() @ S[0]["qwt"].double()) * S[0]["sx"].double() * S[0]["sw"].double() + S[0]["bias"].double()
        got = tcgemm.scaled_gemm(S[0]["qx"], S[0]["qwt"], S[0]["sx"], S[0]["sw"], S[0]["bias"]).double()
        err = float((got - ref).abs().max() / ref.abs().max())
        s0 = S[0]
        a_deq = s0["qxb"].double() * s0["sxb"].double().repeat_interleave(128, dim=1)[:, :k]
        b_deq = s0["qwt"].double() * s0["swb"].double().repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k].t()
        ref_b = a_deq @ b_deq + s0["bias"].double()
        got_b = tcgemm.scaled_gemm(s0["qxb"], s0["qwt"], s0["sxb"], s0["swb"], s0["bias"]).double()
        err = max(err, float((got_b - ref_b).abs().max() / ref_b.abs().max()))
        del a_deq, b_deq, ref_b, got_b
        methods = {
            "int8": lambda i: tcgemm.int8_gemm(S[i]["qx"], S[i]["qwt"]),
            "chan": lambda i: tcgemm.scaled_gemm(S[i]["qx"], S[i]["qwt"], S[i]["sx"], S[i]["sw"], S[i]["bias"]),
            "block": lambda i: tcgemm.scaled_gemm(S[i]["qxb"], S[i]["qwt"], S[i]["sxb"], S[i]["swb"], S[i]["bias"]),
            "fp8": lambda i: torch._scaled_mm(S[i]["fx"], S[i]["fwt"], scale_a=S[i]["fsx"], scale_b=S[i]["fsw"],
                                              out_dtype=torch.bfloat16),
            "e2e": lambda i: e2e(S[i]),
        }
        names = list(methods)
        times = {name: [] for name in names}
        per_round = {name: [] for name in names}
        for name in names:
            for i in range(5):
                methods[name](i % n_sets)
        torch.cuda.synchronize()
        calls = 20
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                t = burst_ms(methods[name], n_sets, calls)
                times[name] += t
                per_round[name].append(statistics.median(t))
        flops = 2 * m * n * k
        tops = {name: flops / statistics.median(times[name]) / 1e9 for name in names}
        rr = " ".join(f"{flops / a / 1e9:.0f}/{flops / b / 1e9:.0f}" for a, b in zip(per_round["int8"], per_round["chan"]))
        print(f"{m}x{n}x{k}: " + " ".join(f"{nm}={tops[nm]:.0f}" for nm in names) +
              f" chan/int8={tops['chan'] / tops['int8']:.3f} block/chan={tops['block'] / tops['chan']:.3f} chan/fp8={tops['chan'] / tops['fp8']:.3f} err={err:.1e}"
              f" | rounds int8/chan {rr}", flush=True)
        del S
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

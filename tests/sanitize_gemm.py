"""Small GEMMs on every CUDA backend for compute-sanitizer (not collected by pytest).

    compute-sanitizer --tool memcheck  python tests/sanitize_gemm.py
    compute-sanitizer --tool racecheck python tests/sanitize_gemm.py

Shapes are small and odd so every edge path (M/N/K tails, padded copies, sign-flip offsets,
split-K) runs; each result is also checked bit-exact, and the script exits non-zero on a mismatch.
Then tcgemm.quantize (every granularity, symmetric and asymmetric) and tcgemm.scaled_gemm
(per-channel scales, 128x128 and per-column 1x128 weight blocks, zero points, bf16 and fp32 outputs, on every scaled backend),
checked against their references, and quant_linear against the two ops it fuses.
"""

import sys

import torch

import tcgemm
from tcgemm.reference import gemm_reference, quantize_asym_reference, quantize_reference, scaled_gemm_reference


def _layer(gen, m, n, k, device="cuda"):
    """A quant_linear case: bf16 x [m, k], int8 weight [n, k], its scales, bias, SmoothQuant
    multipliers and a static input scale."""
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
    w = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    ws = torch.rand(n, generator=gen)
    bias = torch.randn(n, generator=gen)
    smooth = torch.rand(k, generator=gen) + 0.5
    return tuple(t.to(device) for t in (x, w, ws, bias, smooth, torch.tensor(0.02)))


def main() -> int:
    gen = torch.Generator().manual_seed(7)
    failures = 0
    for backend in tcgemm.backends_for("gemm", device="cuda"):
        for m, n, k in [(33, 17, 100), (130, 129, 257), (20, 200, 3000)]:
            for da, db, a_col in [(torch.int8, torch.int8, False), (torch.uint8, torch.int8, True)]:
                low_a = -128 if da == torch.int8 else 0
                a = torch.randint(low_a, low_a + 256, (k, m) if a_col else (m, k), generator=gen).to(da).cuda()
                a = a.t() if a_col else a
                b = torch.randint(-128, 128, (k, n), generator=gen).to(db).cuda()
                c = torch.randint(-1000, 1000, (m, n), dtype=torch.int32, generator=gen).cuda()
                d = tcgemm.gemm(a, b, c, alpha=2, beta=-1, backend=backend)
                ok = torch.equal(d.cpu(), gemm_reference(a, b, c, 2, -1))
                failures += not ok
                print(f"{backend:12s} {m}x{n}x{k} {da} x {db} a_col={a_col}: {'exact' if ok else 'MISMATCH'}")
    for m, k in [(33, 100), (5, 3000)]:
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16)
        for gran in ("tensor", "token", "group"):
            q, s = tcgemm.quantize(x.cuda(), gran)
            rq, rs = quantize_reference(x, gran)
            ok = torch.equal(q.cpu(), rq) and torch.equal(s.cpu(), rs)
            failures += not ok
            print(f"quantize {gran:6s} {m}x{k}: {'exact' if ok else 'MISMATCH'}")
    # Bad data and strides: NaN / inf inputs, a static scale with invalid entries, a transposed
    # and an expand-ed x (the scalar, any-stride kernels).
    x = torch.randn(9, 300, generator=gen)
    x[1, 5], x[4, 200], x[7, 299] = float("nan"), float("inf"), float("-inf")
    for name, xv in [("non-finite", x), ("transposed", x.t().contiguous().t()), ("expanded", x[:1].expand(9, 300))]:
        for gran in ("tensor", "token", "group"):
            rq, rs = quantize_reference(xv, gran)
            for static in (False, True):
                given = rs.masked_fill(rs.isnan(), 0.0) if static else None
                q, s = tcgemm.quantize(xv.cuda(), gran, scale=None if given is None else given.cuda())
                rq, rs2 = quantize_reference(xv, gran, given)
                ok = torch.equal(q.cpu(), rq) and torch.equal(s.cpu().nan_to_num(-1), rs2.nan_to_num(-1))
                failures += not ok
                print(f"quantize {name} {gran:6s} static={static}: {'exact' if ok else 'MISMATCH'}")
    # Asymmetric: dynamic per token and static (a zero point out of range in one row), bad data.
    for name, xv in [("non-finite", x + 0.5), ("expanded", (x[:1] + 0.5).expand(9, 300))]:
        q, s, z = tcgemm.quantize(xv.cuda(), "token", symmetric=False)
        rq, rs, rz = quantize_asym_reference(xv, "token")
        given_s, given_z = rs.nan_to_num(0.1), rz.clone()
        given_z[2] = 300
        q2, s2, z2 = tcgemm.quantize(xv.cuda(), "token", symmetric=False, scale=given_s.cuda(), zero_point=given_z.cuda())
        rq2, rs2, rz2 = quantize_asym_reference(xv, "token", scale=given_s, zero_point=given_z)
        ok = (torch.equal(q.cpu(), rq) and torch.equal(s.cpu().nan_to_num(-1), rs.nan_to_num(-1))
              and torch.equal(z.cpu(), rz) and torch.equal(q2.cpu(), rq2) and torch.equal(z2.cpu(), rz2)
              and torch.equal(s2.cpu().nan_to_num(-1), rs2.nan_to_num(-1)))
        failures += not ok
        print(f"quantize asymmetric {name}: {'exact' if ok else 'MISMATCH'}")
    scaled = tcgemm.backends_for("scaled_gemm", device="cuda")
    for backend in scaled:
        for m, n, k in [(33, 17, 100), (130, 129, 700)]:
            a = torch.randint(-127, 128, (m, k), generator=gen, dtype=torch.int8)
            w = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
            kb, nb = -(-k // 128), -(-n // 128)
            for sa, sb, out_dtype in [(torch.rand(m, 1, generator=gen), torch.rand(n, generator=gen), torch.bfloat16),
                                      (torch.rand(m, kb, generator=gen), torch.rand(nb, kb, generator=gen), torch.float32),
                                      (torch.rand(m, kb, generator=gen), torch.rand(n, kb, generator=gen), torch.bfloat16)]:
                bias = torch.randn(n, generator=gen)
                y = tcgemm.scaled_gemm(a.cuda(), w.cuda().t(), sa.cuda(), sb.cuda(), bias.cuda(), out_dtype, backend=backend)
                ref = scaled_gemm_reference(a, w.t(), sa, sb, bias, return_float64=True)
                ok = bool(torch.allclose(y.cpu().double(), ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max())))
                failures += not ok
                print(f"scaled {backend} {m}x{n}x{k} sa{list(sa.shape)} sb{list(sb.shape)} {out_dtype}: {'exact' if ok else 'MISMATCH'}")
            za = torch.randint(-128, 128, (m, 1), generator=gen, dtype=torch.int32)
            sa, sb = torch.rand(m, 1, generator=gen), torch.rand(n, generator=gen)
            y = tcgemm.scaled_gemm(a.cuda(), w.cuda().t(), sa.cuda(), sb.cuda(), None, torch.float32, backend=backend,
                                   zero_point_a=za.cuda())
            ref = scaled_gemm_reference(a, w.t(), sa, sb, return_float64=True, zero_point_a=za)
            ok = bool(torch.allclose(y.cpu().double(), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max())))
            failures += not ok
            print(f"scaled {backend} {m}x{n}x{k} zero points: {'exact' if ok else 'MISMATCH'}")
    # The fused layer: quant_linear at few rows (skinny kernel behind a programmatic dependent
    # launch on sm_90+) and more rows, dynamic / static activations, with SmoothQuant multipliers;
    # compared bit for bit with quantize followed by scaled_gemm.
    for m, n, k in [(1, 72, 300), (4, 130, 1000), (40, 33, 260)]:
        x, w, ws, bias, smooth, static = _layer(gen, m, n, k)
        for act, in_scale in [("token", None), ("static", static)]:
            for sm in (None, smooth):
                y = tcgemm.quant_linear(x, w, ws, bias, activation=act, input_scale=in_scale, smooth=sm)
                q, s = tcgemm.quantize(x, "tensor" if act == "static" else act, scale=in_scale, smooth=sm)
                ref = tcgemm.scaled_gemm(q, w.t(), s, ws, bias, out_dtype=x.dtype)
                ok = torch.equal(y, ref)
                failures += not ok
                print(f"quant_linear {m}x{n}x{k} {act} smooth={sm is not None}: {'exact' if ok else 'MISMATCH'}")
            zero = torch.tensor(-30, dtype=torch.int32).cuda() if act == "static" else None
            y = tcgemm.quant_linear(x, w, ws, bias, activation=act, input_scale=in_scale, asymmetric=True,
                                    input_zero_point=zero)
            q, s, z = tcgemm.quantize(x, "tensor" if act == "static" else act, scale=in_scale, symmetric=False,
                                      zero_point=zero)
            ref = tcgemm.scaled_gemm(q, w.t(), s, ws, bias, out_dtype=x.dtype, zero_point_a=z)
            ok = torch.equal(y, ref)
            failures += not ok
            print(f"quant_linear {m}x{n}x{k} {act} asymmetric: {'exact' if ok else 'MISMATCH'}")
    # The one-kernel layer: the skinny GEMM quantizing x itself (a few rows, weight rows 16-byte
    # aligned): its shared-memory rows and scales, per token, per 1x128 group and static, with a
    # K tail.
    if "skinny" in scaled:
        for m, n, k in [(1, 300, 1008), (3, 140, 528), (2, 8464, 528)]:  # the last: more tiles than blocks
            x, w, ws, bias, smooth, static = _layer(gen, m, n, k)
            for act, granularity, in_scale in [("token", "token", None), ("block", "group", None),
                                               ("static", "tensor", static)]:
                for sm in (None, smooth):
                    y = tcgemm.quant_linear(x, w, ws, bias, activation=act, input_scale=in_scale, smooth=sm,
                                            backend="skinny")
                    q, s = tcgemm.quantize(x, granularity, scale=in_scale, smooth=sm)
                    ref = tcgemm.scaled_gemm(q, w.t(), s, ws, bias, out_dtype=x.dtype, backend="skinny")
                    ok = torch.equal(y, ref)
                    failures += not ok
                    print(f"quant_linear skinny {m}x{n}x{k} {act} smooth={sm is not None}: "
                          f"{'exact' if ok else 'MISMATCH'}")
    # Packed 4-bit weights (two-level group scales or none): the few-rows kernel that streams them
    # (forced, and through quant_linear's in-kernel quantization) and the unpacking of the others,
    # each against the int8 GEMM of the unpacked weight. N = 25384: at least three 32-column tiles
    # per block of the persistent grid on up to 132 SMs (the tiles' sums through two buffers in turn).
    # At most one tile per SM and K >= 2048 (the last four): on sm90 each tile's K is split between
    # the two blocks of a cluster, whose sums meet in distributed shared memory; at one row and K past
    # 8192, each block quantizes x's chunks its warps read and the amaxes meet there too.
    for m, n, k in [(1, 300, 1008), (3, 140, 530), (17, 40, 264), (2, 8464, 512), (1, 25384, 256), (6, 25384, 384),
                    (1, 1000, 2048 + 96), (5, 200, 4096), (16, 2112, 2048), (1, 1000, 10240 + 32)]:
        a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8).cuda()
        packed = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8).cuda()
        gs = torch.randint(1, 17, (n, (k + 127) // 128), generator=gen, dtype=torch.int8).cuda()
        for backend in tcgemm.backends_for("gemm", device="cuda"):
            for group in (None, gs):
                got = tcgemm.int4_gemm(a, packed, group, backend=backend)
                ok = torch.equal(got, tcgemm.int8_gemm(a, tcgemm.unpack_int4(packed, group).t(), backend=backend))
                failures += not ok
                print(f"int4_gemm {backend:12s} {m}x{n}x{k} groups={group is not None}: {'exact' if ok else 'MISMATCH'}")
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        ws = torch.rand(n, generator=gen).cuda()
        for act in ("token", "block"):
            y = tcgemm.quant_linear(x, packed, ws, activation=act, weight_group_scale=gs, backend="skinny")
            ref = tcgemm.quant_linear(x, tcgemm.unpack_int4(packed, gs), ws, activation=act, backend="skinny")
            ok = torch.equal(y, ref)
            failures += not ok
            print(f"quant_linear 4-bit skinny {m}x{n}x{k} {act}: {'exact' if ok else 'MISMATCH'}")
        # Zero points (asymmetric weights) with fp32 group scales: read in place by the few-rows
        # kernel, each K block's sums less zero point times the block's row sums of x.
        zp = torch.randint(-8, 8, (n, (k + 127) // 128), generator=gen, dtype=torch.int8).cuda()
        wg = torch.rand(n, (k + 127) // 128, generator=gen).cuda() * 1e-2
        y = tcgemm.quant_linear(x, packed, wg, weight_zero_point=zp, backend="skinny").float()
        ref = tcgemm.quant_linear(x, tcgemm.unpack_int4(packed, zero_point=zp), wg, backend="skinny").float()
        ok = torch.allclose(y, ref, rtol=2**-7, atol=2**-7 * ref.abs().max().item())
        failures += not ok
        print(f"quant_linear 4-bit skinny zero points {m}x{n}x{k}: {'close' if ok else 'MISMATCH'}")
        # fp32 scales per 64 or 32 inputs: the few-rows kernel's slot rows at every M (a tile row per
        # 16 / slots rows of x), against the CPU's promotion per group.
        for size in (64, 32):
            wg = torch.rand(n, -(-k // size), generator=gen) * 1e-2
            y = tcgemm.quant_linear(x, packed, wg.cuda()).float().cpu()
            ref = tcgemm.quant_linear(x.cpu(), packed.cpu(), wg).float()
            ok = torch.allclose(y, ref, rtol=2**-7, atol=2**-7 * ref.abs().max().item())
            failures += not ok
            print(f"quant_linear 4-bit skinny groups of {size} {m}x{n}x{k}: {'close' if ok else 'MISMATCH'}")
            # The same scales as a bf16 / fp16 table, read in place: the fp32 table's bits.
            for half in (torch.bfloat16, torch.float16):
                wh = wg.to(half)
                y16 = tcgemm.quant_linear(x, packed, wh.cuda())
                ok = torch.equal(y16, tcgemm.quant_linear(x, packed, wh.float().cuda()))
                failures += not ok
                print(f"quant_linear 4-bit skinny groups of {size} {half} {m}x{n}x{k}: {'exact' if ok else 'MISMATCH'}")
    # More rows, and tiles that fill the SMs: on sm90 the tiled kernel unpacks the packed weight in
    # shared memory (int32 and the scaled epilogue), against the unpacked int8 weight; at prefill
    # rows (2048) the int8 kernel's producer warps unpack it into its B as it runs; the W4 kernel
    # (the weight as wgmma's register operand) at 129 rows (K split 4 over a cluster) and 100, and
    # with two blocks per SM at 24 rows and at 33 (K split 2, uneven).
    for m, n, k in [(300, 12840, 1024 + 32), (33, 13576, 4096), (257, 7000, 96), (2048, 600, 1024 + 96),
                    (129, 300, 8192), (100, 13000, 2048), (24, 28672, 4096), (33, 9000, 8192 + 1152)]:
        if "sm90" not in tcgemm.available_backends():
            break
        a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8).cuda()
        packed = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8).cuda()
        gs = torch.randint(1, 17, (n, (k + 127) // 128), generator=gen, dtype=torch.int8).cuda()
        for group in (None, gs):
            got = tcgemm.int4_gemm(a, packed, group, backend="sm90")
            ok = torch.equal(got, tcgemm.int8_gemm(a, tcgemm.unpack_int4(packed, group).t(), backend="sm90"))
            failures += not ok
            print(f"int4_gemm sm90 {m}x{n}x{k} groups={group is not None}: {'exact' if ok else 'MISMATCH'}")
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        ws = torch.rand(n, generator=gen).cuda()
        y = tcgemm.quant_linear(x, packed, ws, weight_group_scale=gs, backend="sm90")
        ok = torch.equal(y, tcgemm.quant_linear(x, tcgemm.unpack_int4(packed, gs), ws, backend="sm90"))
        failures += not ok
        print(f"quant_linear 4-bit sm90 {m}x{n}x{k}: {'exact' if ok else 'MISMATCH'}")
        if k % 128 == 0:  # rotated x: quantized into the W4 K order by the rotating token kernel
            y = tcgemm.quant_linear(x, packed, ws, weight_group_scale=gs, rotate=True, backend="sm90")
            ok = torch.equal(y, tcgemm.quant_linear(x, tcgemm.unpack_int4(packed, gs), ws, rotate=True, backend="sm90"))
            failures += not ok
            print(f"quant_linear 4-bit sm90 rotated {m}x{n}x{k}: {'exact' if ok else 'MISMATCH'}")
        if m <= 64:  # fp32 group scales: the W4 kernel's promoting configs, the order of fp32 sums aside
            wg = torch.rand(n, (k + 127) // 128, generator=gen).cuda() * 1e-2
            y = tcgemm.quant_linear(x, packed, wg, backend="sm90").float()
            ref = tcgemm.quant_linear(x, tcgemm.unpack_int4(packed), wg, backend="sm90").float()
            ok = torch.allclose(y, ref, rtol=2**-7, atol=2**-7 * ref.abs().max().item())
            failures += not ok
            print(f"quant_linear 4-bit sm90 fp32 group scales {m}x{n}x{k}: {'close' if ok else 'MISMATCH'}")
    # One row against an int8 weight of 20 MiB or more on sm90: the GEMV (N and K off its steps).
    if torch.cuda.get_device_capability() == (9, 0):
        n, k = 5121, 4112
        a = torch.randint(-128, 128, (1, k), generator=gen, dtype=torch.int8)
        w = torch.randint(-128, 128, (n, k), generator=gen, dtype=torch.int8)
        ok = torch.equal(tcgemm.int8_gemm(a.cuda(), w.cuda().t()).cpu(), gemm_reference(a, w.t()))
        x, ws = torch.randn(1, k, generator=gen).to(torch.bfloat16).cuda(), torch.rand(n, generator=gen).cuda()
        y = tcgemm.quant_linear(x, w.cuda(), ws)
        ok = ok and torch.equal(y, tcgemm.quant_linear(x, w.cuda(), ws, backend="skinny"))
        failures += not ok
        print(f"gemv 1x{n}x{k} int8_gemm and quant_linear: {'exact' if ok else 'MISMATCH'}")
    torch.cuda.synchronize()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

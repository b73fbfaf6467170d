"""Variants of the tree for A/B timing (tools/ab_device.sh): python3 tools/ab_patch.py DIR VARIANT

nocvt, noload: the scaled epilogue without its int->float conversion / its scale and bias loads
(timing only, results wrong). noskinny: no route to the skinny kernel. desc64: wgmma descriptors
advanced by a 64-bit add. coopint8: int8_gemm (M >= 1024) on the per-block kernel's tile.
nopromo: the per-block kernel without promotion (timing only). ct2, ct4: skinny blocks of 16 or
32 columns at every N. fullbox: sm90 A boxes of BM rows at any M. nostore80: the sm80 epilogue
without its global stores (timing only). VARIANT may join several with +. (benchmarks/NOTES-scaled.md step 12)
"""
import sys
root, variant = sys.argv[1], sys.argv[2]
p = f"{root}/csrc/epilogue/scaled_epilogue.h"
s = open(p).read()
if variant == "nocvt":
    old = "return static_cast<float>(acc) * r.scale * c.scale + c.bias;"
    assert old in s
    s = s.replace(old, "#if defined(__CUDA_ARCH__)\n      return __int_as_float(acc) * r.scale * c.scale + c.bias;\n#else\n      " + old + "\n#endif")
elif variant == "noload":
    old1 = "return Row{PerBlock ? 1.0f : sa(m, 0)};"
    old2 = "return Col{in_main_loop ? 1.0f : sb(n, 0), p.bias != nullptr ? p.bias[n] : 0.0f};"
    assert old1 in s and old2 in s
    s = s.replace(old1, "(void)m; return Row{1.0f};").replace(old2, "(void)n; (void)in_main_loop; return Col{1.0f, 0.0f};")
elif variant == "noskinny":
    p = f"{root}/csrc/dispatch/heuristics.h"
    s = open(p).read()
    old = "return few_rows && (n + 15) / 16 >= sm_count && k >= 512;"
    assert old in s
    s = s.replace(old, "(void)few_rows; (void)n; (void)k; (void)sm_count; return false;")
elif variant in ("ct2", "ct4"):  # skinny blocks of 16 (ct2) or 32 (ct4) columns at every N
    p = f"{root}/csrc/dispatch/heuristics.h"
    s = open(p).read()
    old = "return 8 * wide_blocks >= 15LL * sm_count ? SkinnyTile::kRows16Cols32 : SkinnyTile::kRows16Cols16;"
    assert old in s
    s = s.replace(old, "(void)wide_blocks; return SkinnyTile::kRows16Cols" + ("16;" if variant == "ct2" else "32;"))
elif variant == "nostore80":  # sm80 epilogue without its global stores (timing only, results wrong)
    p = f"{root}/csrc/kernels/sm80/sm80_int8_gemm.cuh"
    s = open(p).read()
    old = "  if (row >= p.m || col >= p.n) return;\n  using Out = typename Epi::OutT;"
    assert old in s
    s = s.replace(old, "  if (row >= p.m || col >= p.n || v0 != 0x13572468) return;\n  using Out = typename Epi::OutT;")
elif variant == "desc64":
    p = f"{root}/csrc/ptx/wgmma.cuh"
    s = open(p).read()
    old = """  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & ~uint64_t{0xFFFFFFFFu}) | lo;"""
    assert old in s
    s = s.replace(old, "  return desc + (bytes >> 4);")
elif variant == "coopint8":  # int8_gemm on the per-block kernel's tile (cooperative 128x128): its ceiling
    p = f"{root}/csrc/dispatch/dispatch.cpp"
    s = open(p).read()
    old = "case Sm90Tile::kBlock: break;  // per-block scales only"
    assert old in s
    s = s.replace(old, "case Sm90Tile::kBlock: return sm90::launch_sm90_int8_gemm<Sm90Block>(p, dev.sm_count);")
    open(p, "w").write(s)
    p = f"{root}/csrc/kernels/sm90/sm90_scaled_gemm_block.cu"
    s = open(p).read() + "template void tcgemm::sm90::launch_sm90_int8_gemm<tcgemm::Sm90Block>(const tcgemm::GemmParams&, int);\n"
    open(p, "w").write(s)
    p = f"{root}/csrc/dispatch/heuristics.h"
    s = open(p).read()
    old = "  const int splits = allow_split ? sm_count : 0;"
    assert old in s
    s = s.replace(old, "  if (allow_split && m >= 1024) return Sm90Plan{Sm90Tile::kBlock, 1};\n" + old)
elif variant == "nopromo":  # the per-block kernel without promoting (timing only, results wrong)
    p = f"{root}/csrc/kernels/sm90/sm90_int8_gemm.cuh"
    s = open(p).read()
    old = "        promote_block(cur);\n        combine(raw_next);"
    assert old in s
    s = s.replace(old, "        combine(raw_next);")
elif variant == "fullbox":  # sm90: A loaded in whole BM-row boxes even when M < BM (out-of-bounds rows)
    p = f"{root}/csrc/kernels/sm90/sm90_int8_gemm.cuh"
    s = open(p).read()
    old = "args.a_box_rows = std::min(Cfg::kBM, round_up(p.m, 8));"
    assert old in s
    s = s.replace(old, "args.a_box_rows = Cfg::kBM;")
elif variant != "none":
    raise SystemExit(variant)
open(p, "w").write(s)

"""Diagnostic variants of the scaled epilogue (timing only, results wrong): python3 tools/ab_patch.py DIR VARIANT"""
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
elif variant == "i2f":
    old = "return accf + small_int_to_float(partial) * scale;"
    assert old in s
    s = s.replace(old, "return accf + static_cast<float>(partial) * scale;")
elif variant == "noskinny":
    p = f"{root}/csrc/dispatch/heuristics.h"
    s = open(p).read()
    old = "return m <= kSkinnyMaxRows && (n + 15) / 16 >= sm_count && k >= 512;"
    assert old in s
    s = s.replace(old, "(void)m; (void)n; (void)k; (void)sm_count; return false;")
elif variant != "none":
    raise SystemExit(variant)
open(p, "w").write(s)

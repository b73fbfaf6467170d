#!/usr/bin/env bash
# Diagnostic builds of the sm90 per-block promotion: how the per-block rate depends on the
# instructions spent per accumulator and K block. Results are wrong in every variant but as_is.
#
#   bash scripts/dev/promotion_variants.sh [ROUNDS]      (GPU machine, repository root; default 2)
#
# Variants of the promotion line of consume_tiles_promoting (kernels/sm90/sm90_mainloop.cuh):
#   as_is  I2FP + FFMA (what ships)
#   ffma   one FFMA on the raw int32 bits (the cost of an fp32-accumulating kernel's promotion)
#   three  I2FP + two FFMA
#   none   only the first accumulator of a thread promoted (the other wgmma results unread)
# Each variant is built in place in turn (only the translation units that include the main loop
# recompile) and its extension kept under $PV_DIR/<variant>; the source is restored at the end.
# Every round times scripts.dev.block_rate once per variant, each in its own process, in rotated
# order. $OUT (default benchmarks/results/promotion) gets the build logs and one JSON per run;
# SHAPES (MxNxK ..., default block_rate's six) picks the shapes.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
ROUNDS=${1:-2}
PV_DIR=${PV_DIR:-/tmp/tcgemm_promotion}
OUT=${OUT:-$ROOT/benchmarks/results/promotion}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-$(nproc)}
mkdir -p "$OUT" "$PV_DIR"
SRC=csrc/kernels/sm90/sm90_mainloop.cuh
LINE='accf[mi][i] = promote(accf[mi][i], cur[mi][i], factors.current[mi][(i / 2) % 2]);'
grep -qF "$LINE" "$SRC" || { echo "promotion_variants: the promotion line is not in $SRC" >&2; exit 2; }
cp "$SRC" "$PV_DIR/mainloop.orig"
BUILT_ALL=0
restore() {
  cp "$PV_DIR/mainloop.orig" "$SRC"
  [ "$BUILT_ALL" = 1 ] || echo "promotion_variants: stopped during the builds; the tree's extension may be a" \
    "diagnostic build: run python3 setup.py build_ext --inplace" >&2
}
trap restore EXIT
declare -A BODY=(
  [as_is]="$LINE"
  [ffma]='accf[mi][i] = accf[mi][i] + __int_as_float(cur[mi][i]) * factors.current[mi][(i / 2) % 2];'
  [three]='accf[mi][i] = promote(promote(accf[mi][i], cur[mi][i], factors.current[mi][(i / 2) % 2]), cur[mi][i], factors.current[mi][1 - (i / 2) % 2]);'
  [none]='accf[mi][i] = i == 0 ? promote(accf[mi][i], cur[mi][i], factors.current[mi][0]) : accf[mi][i];'
)
VARIANTS=(ffma three none as_is)  # as_is last: the tree is left with its own build
for v in "${VARIANTS[@]}"; do
  python3 - "$SRC" "$LINE" "${BODY[$v]}" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
open(path, "w").write(text.replace(old, new))
PY
  t0=$(date +%s)
  python3 setup.py build_ext --inplace > "$OUT/build_$v.log" 2>&1 || { tail -30 "$OUT/build_$v.log"; exit 1; }
  rm -rf "$PV_DIR/$v" && mkdir -p "$PV_DIR/$v" && cp -r tcgemm "$PV_DIR/$v/"
  echo "built $v in $(( $(date +%s) - t0 )) s"
  cp "$PV_DIR/mainloop.orig" "$SRC"
done
BUILT_ALL=1
RUNNER=$PV_DIR/runner
rm -rf "$RUNNER" && mkdir -p "$RUNNER"
for d in benchmarks scripts; do ln -s "$ROOT/$d" "$RUNNER/$d"; done
n=${#VARIANTS[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((i = 0; i < n; i++)); do
    v=${VARIANTS[$(( (i + r) % n ))]}
    echo "== round $r $v"
    (cd "$RUNNER" && PYTHONPATH=$PV_DIR/$v python3 -m scripts.dev.block_rate --json "$OUT/${v}_$r.json" \
      ${SHAPES:+--shapes $SHAPES})
  done
done

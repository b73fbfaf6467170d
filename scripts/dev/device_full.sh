#!/usr/bin/env bash
# The full check on the GPU machine: build for sm_90a, the whole test suite (8 processes on the
# GPU), compute-sanitizer memcheck and racecheck over every backend, then a benchmark sweep.
#
#   bash scripts/dev/device_full.sh [bars|square|mrange|all|quick|none]      (default bars)
#
# Logs in $OUT (default benchmarks/results/device_full); exits non-zero when a step fails.
set -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-benchmarks/results/device_full}
mkdir -p "$OUT"
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16}
failed=0

start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { tail -50 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s, $(grep -ci "warning" "$OUT/build.log") lines with 'warning'"
grep -i "warning" "$OUT/build.log" | head -5

# Eight processes share the GPU (pytest-xdist); -v names each test as it finishes, so a run cut
# short by the timeout still names its failures.
timeout 480 python3 -m pytest -v -n 8 -rfE -p no:cacheprovider tests > "$OUT/pytest.log" 2>&1
rc=$?; echo "pytest rc=$rc: $(grep -c " PASSED " "$OUT/pytest.log") passed, $(grep -c " SKIPPED " "$OUT/pytest.log")" \
  "skipped, $(grep -c " FAILED " "$OUT/pytest.log") failed"; [ $rc = 0 ] || failed=1
grep -E " FAILED | ERROR " "$OUT/pytest.log" | head -20

for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 99 python3 tests/sanitize_gemm.py \
    > "$OUT/sanitize_$tool.log" 2>&1
  rc=$?; [ $rc = 0 ] || failed=1
  echo "$tool rc=$rc, $(grep -c exact "$OUT/sanitize_$tool.log") exact;" \
    "$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log")"
done

sweep=${1:-bars}
if [ "$sweep" != none ]; then
  args="--sweep $sweep"; [ "$sweep" = quick ] && args="--quick"
  timeout 500 python3 -m benchmarks.bench_gemm $args --out "$OUT" > "$OUT/bench.log" 2>&1
  rc=$?; echo "bench rc=$rc"; [ $rc = 0 ] || failed=1
  grep -v "^\[" "$OUT/bench.log" | tail -30
fi
exit $failed

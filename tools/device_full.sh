#!/bin/bash
# Device run: build for sm_90a, full test suite, compute-sanitizer on every backend, benchmark.
#   bash tools/device_full.sh [bars|all|none]
set -o pipefail
cd "$(dirname "$0")/.."
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
grep -i "warning" $OUT/build.log | head -5
timeout 420 python3 -m pytest -q tests > $OUT/pytest.log 2>&1; echo "pytest rc=$?"; tail -3 $OUT/pytest.log
grep -E "FAILED|Error" $OUT/pytest.log | head -10
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool python3 tests/sanitize_gemm.py > $OUT/sanitize_$tool.log 2>&1
  echo "$tool rc=$? $(grep -c exact $OUT/sanitize_$tool.log) exact; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/sanitize_$tool.log)"
done
case "${1:-bars}" in
  none) ;;
  *) timeout 500 python3 benchmarks/bench_gemm.py --sweep ${1:-bars} --out $OUT --json $OUT/bench.json --plot $OUT/bench.png > $OUT/bench.log 2>&1; echo "bench rc=$?"; grep -v "^\[" $OUT/bench.log | tail -30 ;;
esac

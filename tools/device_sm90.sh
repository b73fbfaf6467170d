#!/bin/bash
# Device run: build for sm_90a, smoke-check sm90, run the sm90 GPU tests, benchmark the bar shapes.
set -o pipefail
cd "$(dirname "$0")/.."
export TORCH_CUDA_ARCH_LIST=9.0a MAX_JOBS=16
python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -50 $OUT/build.log; exit 1; }
grep -i "warning\|spill\|C75" $OUT/build.log | grep -v "^$" | head -20
python3 -c "import tcgemm; print(tcgemm.available_backends('cuda'))"
timeout 120 python3 tools/smoke_gemm.py sm90 > $OUT/smoke.log 2>&1; rc=$?; tail -3 $OUT/smoke.log; grep -c ok $OUT/smoke.log
[ $rc -eq 0 ] || exit 1
if [ "$1" != "nobench" ]; then
  timeout 300 python3 benchmarks/bench_gemm.py --sweep bars --backends sm90,sm80 --reps 50 --out $OUT > $OUT/bench.log 2>&1; tail -25 $OUT/bench.log
fi
if [ "$1" = "tests" ]; then
  timeout 400 python3 -m pytest -q -x tests/test_gemm_gpu.py -k "sm90" > $OUT/pytest.log 2>&1; tail -5 $OUT/pytest.log
fi

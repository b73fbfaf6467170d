#!/bin/bash
# A/B: the tree as is, plus diagnostic variants built in /tmp copies; interleaved timing in each.
#   bash tools/ab_device.sh VARIANT...   (variant "head": the commit REF, default HEAD)
set -o pipefail
cd "$(dirname "$0")/.."
export TORCH_CUDA_ARCH_LIST=9.0a
ROOT=$PWD
for v in "$@"; do
  rm -rf /tmp/v_$v && mkdir -p /tmp/v_$v
  if [ $v = head ]; then git archive ${REF:-HEAD} | tar xf - -C /tmp/v_$v; cp tools/ab_*.py /tmp/v_$v/tools/
  else git ls-files -co --exclude-standard | tar cf - -T - | tar xf - -C /tmp/v_$v; for part in ${v//+/ }; do python3 tools/ab_patch.py /tmp/v_$v $part || exit 1; done; fi
  (cd /tmp/v_$v && MAX_JOBS=6 python3 setup.py build_ext --inplace > $OUT/build_$v.log 2>&1; echo "build $v rc=$?") &
done
MAX_JOBS=6 python3 -m pip install --no-build-isolation --no-deps -e . > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
wait
[ -n "$PRE" ] && eval "$PRE"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 > $OUT/smi.csv 2>&1 &
SMI=$!
echo "== base"; python3 ${SCRIPT:-tools/ab_scaled.py} ${ROUNDS:-6} 2>&1 | tee $OUT/ab_base.log
for v in "$@"; do
  echo "== $v"; (cd /tmp && PYTHONPATH=/tmp/v_$v python3 $ROOT/${SCRIPT:-tools/ab_scaled.py} ${ROUNDS:-6}) 2>&1 | tee $OUT/ab_$v.log
done
kill $SMI

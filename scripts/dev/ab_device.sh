#!/usr/bin/env bash
# A/B timing of two builds on the GPU machine: the working tree ("new") against a commit ("base").
#
#   bash scripts/dev/ab_device.sh [ROUNDS]                      (from anywhere; default 5 rounds)
#
# Environment:
#   REF        the base commit (default HEAD), exported with `git archive` and built in $AB_DIR/base
#   BASE_TREE  instead of REF: a folder holding the base sources (e.g. `git archive REF` unpacked
#              into a folder .git/info/exclude ignores, carried to a machine whose clone lacks REF)
#   NEW_REF    build this commit as the new side instead of the working tree; NEW_REF equal to REF
#              is an A/A run (one build, both sides): the noise between processes
#   BENCHES    the timing commands, ';'-separated: python modules with their arguments, each taking
#              --json PATH (default: the quick sweeps of bench_gemm and bench_scaled without peers)
#   BENCH_SIDE base: time both sides with the base tree's benchmarks/ (when the working tree's
#              use an API the base lacks); default: the working tree's
#   AB_DIR     where the exported trees are built (default /tmp/tcgemm_ab); a later call on the same
#              machine finds a tree built at the same commit and skips its build
#   OUT        where the logs and results go (default benchmarks/results/ab)
#   TORCH_CUDA_ARCH_LIST (default 9.0a), MAX_JOBS (per build; default: the cores split between the builds)
#
# The trees build with `python3 setup.py build_ext --inplace`, in parallel. Two builds cannot load in
# one process (both register the torch.ops.tcgemm namespace), so each round runs every timing command
# once per tree, each in its own process: base then new in even rounds, new then base in odd ones
# (base, new, new, base, ...), so drift over the run hits both sides alike. The timing code is the
# working tree's benchmarks/ for both sides; only the tcgemm they import differs (checked first).
# $OUT gets build_base.log, build_new.log, smi.csv (SM clock, power and temperature every 200 ms),
# ab_runs.tar.gz (every run's log and JSON) and ab_summary.txt (scripts/dev/ab_compare.py per command).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
ROUNDS=${1:-${ROUNDS:-5}}
REF=${REF:-HEAD}
AB_DIR=${AB_DIR:-/tmp/tcgemm_ab}
OUT=${OUT:-$ROOT/benchmarks/results/ab}
BENCHES=${BENCHES:-"benchmarks.bench_gemm --quick --no-peers;benchmarks.bench_scaled --quick --no-peers"}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
mkdir -p "$OUT" "$AB_DIR"
OUT=$(cd "$OUT" && pwd)

commit_of() {
  git -C "$ROOT" rev-parse --verify --quiet "$1^{commit}" || {
    echo "ab_device: '$1' is not a commit of this checkout (the script needs its git history)" >&2
    exit 2
  }
}

# export_tree COMMIT DIR: the commit's files (or BASE_TREE's, for a "tree:" id) in DIR, unless
# DIR already holds a build of it.
export_tree() {
  if [ -f "$2/.ab_commit" ] && [ "$(cat "$2/.ab_commit")" = "$1" ] && ls "$2"/tcgemm/_C*.so > /dev/null 2>&1; then
    return 1
  fi
  rm -rf "$2" && mkdir -p "$2"
  case "$1" in
    tree:*) cp -a "$BASE_TREE"/. "$2"/ ;;
    *) git -C "$ROOT" archive "$1" | tar -x -C "$2" ;;
  esac
}

# build_tree DIR LOG [COMMIT]: build in place; COMMIT marks DIR as a finished build of it.
build_tree() {
  if (cd "$1" && MAX_JOBS=$JOBS python3 setup.py build_ext --inplace > "$2" 2>&1); then
    [ -z "${3:-}" ] || echo "$3" > "$1/.ab_commit"
  else
    echo "ab_device: the build in $1 failed; the end of $2:" >&2
    tail -30 "$2" >&2
    return 1
  fi
}

if [ -n "${BASE_TREE:-}" ]; then
  BASE_COMMIT="tree:$(cd "$BASE_TREE" && find . -type f -print0 | sort -z | xargs -0 cat | md5sum | cut -c1-12)"
  REF=$BASE_TREE
else
  BASE_COMMIT=$(commit_of "$REF")
fi
BASE=$AB_DIR/base
NEW=$ROOT
NEW_COMMIT=""
if [ -n "${NEW_REF:-}" ]; then
  NEW_COMMIT=$(commit_of "$NEW_REF")
  NEW=$AB_DIR/new
  [ "$NEW_COMMIT" = "$BASE_COMMIT" ] && NEW=$BASE
fi
echo "base: $REF ($BASE_COMMIT) in $BASE"
echo "new:  ${NEW_REF:-the working tree} ${NEW_COMMIT:+($NEW_COMMIT) }in $NEW"
builds=()  # "DIR LOG COMMIT" of each tree to build
if export_tree "$BASE_COMMIT" "$BASE"; then
  builds+=("$BASE $OUT/build_base.log $BASE_COMMIT")
else
  echo "base: reusing the build in $BASE" | tee "$OUT/build_base.log"
fi
if [ "$NEW" = "$ROOT" ]; then
  builds+=("$ROOT $OUT/build_new.log")
elif [ "$NEW" = "$BASE" ]; then
  echo "new: the base build (A/A)" | tee "$OUT/build_new.log"
elif export_tree "$NEW_COMMIT" "$NEW"; then
  builds+=("$NEW $OUT/build_new.log $NEW_COMMIT")
else
  echo "new: reusing the build in $NEW" | tee "$OUT/build_new.log"
fi
start=$(date +%s)
pids=()
if [ ${#builds[@]} -gt 0 ]; then
  JOBS=${MAX_JOBS:-$(( $(nproc) / ${#builds[@]} > 0 ? $(nproc) / ${#builds[@]} : 1 ))}
  for b in "${builds[@]}"; do
    build_tree $b & pids+=($!)
  done
fi
for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid"; done
echo "builds done in $(( $(date +%s) - start )) s"

# The timing processes start in a directory holding only links to the working tree's Python
# folders, so `import tcgemm` finds the side's tree through PYTHONPATH and nothing else.
RUNNER=$AB_DIR/runner
rm -rf "$RUNNER" && mkdir -p "$RUNNER"
for d in benchmarks scripts examples; do ln -s "$ROOT/$d" "$RUNNER/$d"; done
if [ "${BENCH_SIDE:-new}" = base ]; then rm "$RUNNER/benchmarks" && ln -s "$BASE/benchmarks" "$RUNNER/benchmarks"; fi
for side in base new; do
  tree=$BASE; [ $side = new ] && tree=$NEW
  got=$(cd "$RUNNER" && PYTHONPATH=$tree python3 -c "import tcgemm; print(tcgemm.__file__)")
  case "$got" in
    "$tree"/*) echo "$side imports $got" ;;
    *) echo "ab_device: the $side side imports $got, not from $tree" >&2; exit 1 ;;
  esac
done

RUNS=$AB_DIR/runs
rm -rf "$RUNS" && mkdir -p "$RUNS"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 200 > "$OUT/smi.csv" 2>&1 &
SMI=$!
trap 'kill $SMI 2> /dev/null || true' EXIT

IFS=';' read -r -a benches <<< "$BENCHES"
for ((r = 0; r < ROUNDS; r++)); do
  order="base new"; [ $((r % 2)) = 1 ] && order="new base"
  for bench in "${benches[@]}"; do
    name=$(echo $bench | awk '{print $1}' | sed 's/.*\.//')
    for side in $order; do
      tree=$BASE; [ $side = new ] && tree=$NEW
      stem=$RUNS/${name}_${side}_$r
      t0=$(date +%s)
      if (cd "$RUNNER" && PYTHONPATH=$tree python3 -m $bench --json "$stem.json") > "$stem.log" 2>&1; then
        echo "round $r $name $side: $(( $(date +%s) - t0 )) s"
      else
        echo "round $r $name $side FAILED; the end of its log:"; tail -20 "$stem.log"; exit 1
      fi
    done
  done
done
kill $SMI 2> /dev/null || true

(
  echo "A/B: new = ${NEW_REF:-the working tree} ${NEW_COMMIT:+($NEW_COMMIT)}," \
    "base = $REF ($BASE_COMMIT), $ROUNDS rounds"
  echo "GPU: $(nvidia-smi --query-gpu=name,power.limit --format=csv,noheader 2> /dev/null || echo unknown)"
  status=0
  for bench in "${benches[@]}"; do
    name=$(echo $bench | awk '{print $1}' | sed 's/.*\.//')
    echo
    echo "== $bench"
    (cd "$RUNNER" && python3 -m scripts.dev.ab_compare --base "$RUNS/${name}_base_"*.json \
      --new "$RUNS/${name}_new_"*.json) || status=1
  done
  exit $status
) > "$OUT/ab_summary.txt" 2>&1 && verdict=0 || verdict=$?
tar -czf "$OUT/ab_runs.tar.gz" -C "$RUNS" .
cat "$OUT/ab_summary.txt"
exit $verdict

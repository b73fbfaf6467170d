#!/usr/bin/env bash
# Nsight Compute side by side: the per-block kernel, the per-channel kernel and torch's fp8
# block-scaled _scaled_mm (the per-block target is 1.05x its TOPS) at one shape: launch configuration, pipe use, warp
# states and stalls per instruction (scripts/dev/ncu_target.py picks the calls by NVTX range).
#
#   bash scripts/dev/peer_profile.sh [MxNxK]        (GPU machine, after the build; OUT: where the
#   reports go, default /tmp/peer_profile)
set -euo pipefail
cd "$(dirname "$0")/../.."
SHAPE=${1:-4096x4096x4096}
OUT=${OUT:-/tmp/peer_profile}
mkdir -p "$OUT"
WORK=$(mktemp -d)  # the reports and their exports
trap 'rm -rf "$WORK"' EXIT
for op in fp8_block scaled_block scaled_chan; do
  ncu --nvtx --nvtx-include "target/" --clock-control none --launch-count 1 --kernel-name regex:'[Gg]emm|sm90|cutlass' \
    --section LaunchStats --section Occupancy --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section InstructionStats --section SourceCounters \
    -f -o "$WORK/prof_$op" python3 -m scripts.dev.ncu_target "$op" "$SHAPE" >"$OUT/ncu_$op.log" 2>&1
  ncu --import "$WORK/prof_$op.ncu-rep" --page details --csv >"$WORK/details_$op.csv"
  ncu --import "$WORK/prof_$op.ncu-rep" --page source --csv --print-source sass >"$WORK/sass_$op.csv"
  python3 -m scripts.dev.stall_summary "$WORK/sass_$op.csv" --top 40 >"$OUT/stalls_$op.txt"
done
cat "$WORK"/details_*.csv >"$OUT/details.csv"
gzip -c "$WORK/sass_fp8_block.csv" >"$OUT/sass_fp8_block.csv.gz"
gzip -c "$WORK/sass_scaled_block.csv" >"$OUT/sass_scaled_block.csv.gz"
python3 - "$OUT/details.csv" <<'PY'
import csv, sys
keys = ("Duration", "Compute (SM) Throughput", "Issue Slots Busy", "Executed Instructions", "Registers Per Thread",
        "Dynamic Shared Memory Per Block", "Cluster Size", "Warp Cycles Per Issued Instruction")
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[0]
ki, mi, vi, ui = (hdr.index(h) for h in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
for r in rows[1:]:
    if len(r) > vi and r[mi] in keys:
        print(f"{r[ki][:40]:42s}{r[mi]:36s}{r[vi]} {r[ui]}")
PY

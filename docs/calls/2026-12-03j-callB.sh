#!/usr/bin/env bash
# 2026-12-03 (fifteenth session), call B: the wip series (same binary as call A's wip/layer): per-kernel times of the
# FP8 section of the 30B layer bench (ncu, one metric, launches before the FP8 section skipped), then the 235B
# layer bench (call A's timed out at 150 s).
set -uo pipefail
cd "$(dirname "$0")/bB"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 300 ncu --clock-control none --launch-skip 640 --metrics gpu__time_duration.sum \
  --csv ./layer --bench > $OUT/ncu_30B.csv 2> $OUT/ncu_30B.err; echo "== ncu 30B rc $? at $(el) s"; wc -l $OUT/ncu_30B.csv
MEGAMOE_BENCH_ONLY=235B timeout $(( 580 - $(el) )) ./layer --bench > $OUT/layer_235B.txt 2>&1; echo "== layer 235B rc $? at $(el) s"
grep -E "RESULT.*FP8" $OUT/layer_235B.txt | cut -c1-330
echo "total $(el) s"

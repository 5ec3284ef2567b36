#!/usr/bin/env bash
# Prepared in the fourteenth session (2026-12-03) for the next: where each FP8 backward mode's time goes, at both
# shapes. Call H timed Dx 1.020x / Wgrad 0.967x / DxWgrad 1.006x the straight FP8 step at 30B and 0.971x / 0.987x /
# 1.053x at 235B (not additive). Per-kernel durations of one warm pass of the layer bench (ncu, one metric, every
# launch serialised, MEGAMOE_BENCH_REPS=1), then the rotated-order bench at both shapes. Run from a folder holding
# the bundle's `layer` (cargo xtask gpu-bundle): bash next-fp8-breakdown.sh $OUT
set -uo pipefail
out="${1:-.}"
here="$(cd "$(dirname "$0")" && pwd)"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee "$out/gpu.txt"
for shape in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$shape MEGAMOE_BENCH_REPS=1 timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum \
    --csv "$here/layer" --bench > "$out/ncu_$shape.csv" 2> "$out/ncu_$shape.err"
  echo "== ncu $shape rc $? at $(( $(date +%s) - start )) s"
  python3 - "$out/ncu_$shape.csv" > "$out/kernels_$shape.txt" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; k = hdr.index("Kernel Name"); v = hdr.index("Metric Value"); i = hdr.index("ID")
for r in rows[1:]:
    print(r[i], r[k][:40], r[v])
PY
  tail -90 "$out/kernels_$shape.txt"
done
for shape in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$shape timeout 250 "$here/layer" --bench > "$out/layer_$shape.txt" 2>&1
  echo "== layer $shape rc $? at $(( $(date +%s) - start )) s"
  grep -E "RESULT.*FP8" "$out/layer_$shape.txt" | cut -c1-330
done

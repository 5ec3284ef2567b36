#!/usr/bin/env bash
# 2026-12-03 (fourteenth session), call F: where the FP8-wgrad step's time goes. Call E: 8490 us against 8243 for the
# straight FP8 step, ~425 us more than the sum of its parts estimated from the fp8 bench (quantizer passes at 2.8
# TB/s, FP8 wgrad ~500 us faster than bf16). Per-kernel durations of one warm 30B layer bench pass (ncu, one metric,
# every launch serialised; MEGAMOE_BENCH_REPS=1), same binary as call E.
set -uo pipefail
cd "$(dirname "$0")/bF"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv ./layer --bench > $OUT/ncu.csv 2> $OUT/ncu.err
echo "rc $? at $(( $(date +%s) - start )) s"; wc -l $OUT/ncu.csv; tail -2 $OUT/ncu.err
python3 - "$OUT/ncu.csv" > $OUT/kernels.txt <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; k = hdr.index("Kernel Name"); v = hdr.index("Metric Value"); i = hdr.index("ID")
for r in rows[1:]:
    print(r[i], r[k][:40], r[v])
PY
wc -l $OUT/kernels.txt; tail -60 $OUT/kernels.txt
echo "total $(( $(date +%s) - start )) s"

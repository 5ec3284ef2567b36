#!/usr/bin/env bash
# per-kernel times of the 30B layer (ncu, one metric), commit 8768d2f
cd "$(dirname "$0")/bundle"
MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv ./layer --bench > $OUT/ncu.csv 2> $OUT/ncu.err
echo "rc $?"; wc -l $OUT/ncu.csv; tail -3 $OUT/ncu.err

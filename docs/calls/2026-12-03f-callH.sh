#!/usr/bin/env bash
# 2026-12-03 (eleventh session), call H: FP8 v4 (tile slots published by the producer, scale rows prefetched to L1): tests, the
# FP8 bench, then ncu of one 30B GEMM1 launch.
set -uo pipefail
cd "$(dirname "$0")/bF"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
t0=$(date +%s); timeout 200 ./fp8 --include-ignored --test-threads=1 --nocapture > $OUT/fp8.txt 2>&1; rc=$?
echo "== fp8 rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/fp8.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/fp8.txt | head -20
t0=$(date +%s); timeout 150 ./fp8_bench --bench > $OUT/fp8_bench.txt 2>&1; echo "== fp8 bench rc $? in $(( $(date +%s) - t0 )) s"
grep -E "RESULT|FAIL" $OUT/fp8_bench.txt | sed 's/ | rel err.*registers/ | regs/' | cut -c1-330
MEGAMOE_BENCH_ONLY=30B timeout 200 ncu --clock-control none -k regex:"^grouped_gemm_fp8$" --launch-skip 3 --launch-count 1 \
  --set full --import-source no -o $OUT/prof ./fp8_bench --bench > $OUT/ncu_run.txt 2>&1; echo "ncu rc $?"
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu --import $OUT/prof.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass.csv 2>&1
gzip $OUT/ncu_sass.csv $OUT/prof.ncu-rep 2>/dev/null
grep -E "Duration|Tensor is|Issue Slots Busy|Eligible Warps|L2 Cache Throughput" $OUT/ncu_details.txt | head

#!/usr/bin/env bash
# 2026-12-03 (eleventh session), call N: ncu of grouped_gemm_fp8 (30B GEMM1 and GEMM2 shapes, one launch each) from the FP8 bench.
set -uo pipefail
cd "$(dirname "$0")/bF"
MEGAMOE_BENCH_ONLY=30B timeout 200 ncu --clock-control none -k regex:"^grouped_gemm_fp8$" --launch-skip 3 --launch-count 1 \
  --set full --import-source no -o $OUT/prof ./fp8_bench --bench > $OUT/ncu_run.txt 2>&1; echo "ncu rc $?"
tail -3 $OUT/ncu_run.txt
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu --import $OUT/prof.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass.csv 2>&1
gzip $OUT/ncu_sass.csv $OUT/prof.ncu-rep 2>/dev/null
grep -E "^  [a-z_]+.*\(|Duration|Throughput|Warp Cycles Per Issued|Eligible|Registers Per|Achieved Occ|Pipe|Stall|L2 Hit|Bank" $OUT/ncu_details.txt | head -70

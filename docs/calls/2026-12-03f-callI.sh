#!/usr/bin/env bash
# 2026-12-03 (eleventh session), call I: FP8 v4 + the 2-CTA cluster variant sharing A + GEMM1 with the SwiGLU epilogue in FP8 + the layer forward in FP8: tests, the
# FP8 bench, both shapes.
set -uo pipefail
cd "$(dirname "$0")/bF"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
t0=$(date +%s); timeout 200 ./fp8 --include-ignored --test-threads=1 --nocapture > $OUT/fp8.txt 2>&1; rc=$?
echo "== fp8 rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/fp8.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/fp8.txt | head -20
t0=$(date +%s); timeout 150 ./fp8_bench --bench > $OUT/fp8_bench.txt 2>&1; echo "== fp8 bench rc $? in $(( $(date +%s) - t0 )) s"
grep -E "RESULT|FAIL" $OUT/fp8_bench.txt | sed 's/ | rel err.*registers/ | regs/; s/(0.[0-9]* of the 1979 peak) //' | cut -c1-400

#!/usr/bin/env bash
# 2026-12-03 (eleventh session), call F: the first blockwise-FP8 kernels (quantize rows / blocks, grouped_gemm_fp8):
# tests/fp8.rs, then the FP8 bench (FP8 against bf16, both shapes).
set -uo pipefail
cd "$(dirname "$0")/bF"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
t0=$(date +%s); timeout 200 ./fp8 --include-ignored --test-threads=1 --nocapture > $OUT/fp8.txt 2>&1; rc=$?
echo "== fp8 rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/fp8.txt | tail -1)"; grep -E "FAILED|panicked|rel err" $OUT/fp8.txt | head -20
t0=$(date +%s); timeout 150 ./fp8_bench --bench > $OUT/fp8_bench.txt 2>&1; echo "== fp8 bench rc $? in $(( $(date +%s) - t0 )) s"
grep -E "RESULT|FAIL" $OUT/fp8_bench.txt | cut -c1-330

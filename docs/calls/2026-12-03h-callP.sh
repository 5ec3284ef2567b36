#!/usr/bin/env bash
# 2026-12-03 (thirteenth session), call P: the FP8 weight gradients' probe (the main loop without the promotion,
# one wgmma group in flight, the same tiles, ring and epilogue) beside the FP8 and bf16 kernels at 30B: is the data
# path (L2 -> shared memory -> tensor cores at 128 x 128 tiles, ~8.5 blocks a tile) or the promotion what holds the
# FP8 kernel at 1.1-1.2x bf16? Prediction: the probe ~0.75x the FP8 kernel's time if the promotion costs (as the
# forward's probe: 14-17%), ~0.95x if the data path bounds both. Tests first (the host's prepare was refactored).
set -uo pipefail
cd "$(dirname "$0")/bP"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 100 ./fp8 --include-ignored --test-threads=1 > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked" $OUT/fp8.txt | head -5
MEGAMOE_BENCH_FP8_WGRAD=1 MEGAMOE_BENCH_ONLY=30B timeout 150 ./fp8_bench --bench > $OUT/fp8_bench_30B.txt 2>&1; echo "== fp8 bench 30B rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*(K-grouped)|FAIL" $OUT/fp8_bench_30B.txt | cut -c1-420
echo "total $(( $(date +%s) - start )) s"

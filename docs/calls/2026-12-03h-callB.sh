#!/usr/bin/env bash
# 2026-12-03 (thirteenth session), call B: the FP8 weight gradients with B (the activations) in 128 x 128 blocks
# (`quantize_cols_grouped` with block_scales, `grouped_wgrad_fp8b_*`: one FFMA per element in the promotion instead
# of FMUL + FFMA, no B-scale loads). Tests (quantizer bitwise with block scales, wgrad against the dequantized f64
# product), then the 30B weight gradients alone: FP8 (1 x 128), probe, fp8b, bf16. Predicted from call P's probe
# (promotion 26-30% of the FP8 time): fp8b ~0.85x the FP8 kernel's time, ~1.3x bf16; error against bf16 as now.
set -uo pipefail
cd "$(dirname "$0")/bB"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 60 ./fp8 --include-ignored --test-threads=1 --nocapture cols_grouped wgrad_fp8 > $OUT/fp8.txt 2>&1; echo "== fp8 (cols_grouped, wgrad) rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked|FP8 wgrad" $OUT/fp8.txt | head -10
MEGAMOE_BENCH_FP8_WGRAD=only MEGAMOE_BENCH_ONLY=30B timeout 120 ./fp8_bench --bench > $OUT/fp8_bench_30B.txt 2>&1; echo "== fp8 bench 30B rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*(K-grouped)|FAIL" $OUT/fp8_bench_30B.txt | cut -c1-600
echo "total $(( $(date +%s) - start )) s"

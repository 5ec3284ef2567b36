#!/usr/bin/env bash
# 2026-12-03 (thirteenth session), call Y: why the FP8 weight gradients are no faster than bf16 (call X). tests/fp8.rs
# after the review (one poisoned column-quantizer helper); then ncu --set full of grouped_wgrad_fp8_bf16 and
# grouped_wgrad_bf16 on the 30B dW2 shape (two launches each, after the warm-ups). Question: is the FP8 kernel
# bound by L2 -> SM bytes (128 x 128 tiles: 256 bytes per K row of a tile), by the promotion's issue slots, or by
# its barrier waits? Prediction: L2 throughput near the bf16 kernel's, tensor pipe active well under 50%.
set -uo pipefail
cd "$(dirname "$0")/bY"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 100 ./fp8 --include-ignored --test-threads=1 > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked" $OUT/fp8.txt | head -5
MEGAMOE_BENCH_FP8_WGRAD=1 MEGAMOE_BENCH_ONLY=30B timeout 300 ncu --clock-control none -k regex:"^grouped_wgrad(_fp8)?_bf16$" --launch-skip 6 --launch-count 4 \
  --set full --import-source no -o $OUT/prof ./fp8_bench --bench > $OUT/ncu_run.txt 2>&1; echo "== ncu rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*K-grouped" $OUT/ncu_run.txt | cut -c1-200
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
grep -E "grouped_wgrad|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit Rate|Issue Slots Busy|Eligible Warps|No Eligible|Registers Per" $OUT/ncu_details.txt | head -60
ncu --import $OUT/prof.ncu-rep --page raw --csv --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex.sum.per_second,lts__t_bytes.sum.per_second,smsp__average_warp_latency_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard > $OUT/ncu_raw.csv 2>&1
cut -c1-400 $OUT/ncu_raw.csv | head -8
echo "total $(( $(date +%s) - start )) s"

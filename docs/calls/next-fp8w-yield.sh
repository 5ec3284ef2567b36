#!/usr/bin/env bash
# Forty-fifth session (any card): the 128 x 256 FP8 GEMM with its promotions' FFMA runs let yield. The probes
# (2026-12-06h call 1, an H100) put the FFMA promotion at the whole gap: wide 860 us, without promotion 683-699
# (tensor pipe 64% -> 80%). In the SASS half of each run's FFMA carry a reuse flag and the no-yield bit, so a warp
# issues its run in pairs that the other warpgroup's wgmma issue waits behind. b106 = this main's fp8 bench and
# fp8 tests with `grouped_gemm_fp8w_yf`: the same kernel, its reuse-flagged FFMA in runs >= 16 made yielding
# after ptxas (kernels-gpu/src/sass.rs; 58 of 121 FFMA). Carry [".dev/b106"].
# Predicted: bitwise the plain kernel (tests and the bench's check); 1.02-1.08x the plain wide kernel at both
# shapes, tensor pipe 64% -> 66-70%. Under 1.01x: the yield bit is not what holds the other warpgroup back.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b106
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b106/main
BOUND=${BOUND:-420}
t fp8 60 300 gemm_wide
for sh in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$sh timeout $(to 120 150) $B/fp8_bench --bench > $OUT/r/fp8_bench_$sh.txt 2>&1
  echo "== fp8_bench $sh rc $? at $(el) s"
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_$sh.txt | sed -E 's/RESULT fp8 ([^ ]+) (.*) M=.*FP8 ([0-9]+ us).*128 x 256 tiles ([0-9]+ us [0-9]+ TFLOP.s).*probes without the promotion: (.*)\| 128 x 256 with the FFMA runs let yield (.*)/  \1 \2: staged \3, wide \4; yield \6; probes \5/' | cut -c1-260
  grep -E "FAILED|panicked" $OUT/r/fp8_bench_$sh.txt | head -3
done
want="gpu__time_duration.sum sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
smsp__average_warp_latency_issue_stalled_barrier smsp__average_warp_latency_issue_stalled_wait
smsp__average_warp_latency_issue_stalled_math_pipe_throttle smsp__average_warp_latency_issue_stalled_dispatch_stall
smsp__average_warp_latency_issue_stalled_not_selected smsp__average_warp_latency_issue_stalled_selected smsp__inst_executed.sum"
m=$(ncu_metrics "$want")
MEGAMOE_BENCH_ONLY=30B timeout $(to 120 5) ncu --clock-control none -k 'regex:^grouped_gemm_fp8w(_yf)?$' \
  --launch-skip 2 --launch-count 4 --metrics "$m" --csv $B/fp8_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
ncu_table $OUT/r/ncu.csv | sed 's/average_warp_latency_issue_//g'
echo "total $(el) s"

#!/usr/bin/env bash
# Forty-fifth session, third call (any card): the 128 x 256 FP8 GEMM with the reuse flags chained through its
# promotions' FFMA runs. Call 2 (the reverse: every reuse flag of the runs cleared, switching allowed) was slower:
# 0.95-0.97x, tensor pipe 64% -> 61%, dispatch stalls +33%: the register file's read bandwidth, not the scheduler's
# switching, is what the FFMA compete for. b108 = main with `grouped_gemm_fp8w_rc`: the plain wide kernel's twin
# whose FFMA give the scale register the second slot's reuse flag wherever the next FFMA reads it too (59 of 121
# FFMA, every run's scale read once instead of every other FFMA). Carry [".dev/b108"].
# Predicted: bitwise (tests, the bench's check); 1.02-1.06x the plain wide kernel, dispatch stalls down (~-30%),
# tensor pipe 64% -> 66-68%. Level: the scale's reads were not the conflicted ones (the partial and the
# accumulator share banks instead, which only ptxas's register assignment decides).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b108
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
B=b108/main; t fp8 60 150 gemm_wide
for sh in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$sh timeout $(to 120 40) $B/fp8_bench --bench > $OUT/r/fp8_bench_$sh.txt 2>&1
  echo "== fp8_bench $sh rc $? at $(el) s"
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_$sh.txt | sed -E 's/RESULT fp8 ([^ ]+) (.*) M=.*FP8 ([0-9]+ us).*128 x 256 tiles ([0-9]+ us [0-9]+ TFLOP.s).*probes without the promotion: (.*)\| 128 x 256 with the FFMA runs. reuse chained (.*)/  \1 \2: staged \3, wide \4; reuse chained \6; probes \5/' | cut -c1-260
  grep -E "FAILED|panicked" $OUT/r/fp8_bench_$sh.txt | head -3
done
want="gpu__time_duration.sum sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
smsp__average_warp_latency_issue_stalled_dispatch_stall smsp__average_warp_latency_issue_stalled_barrier
smsp__average_warp_latency_issue_stalled_wait smsp__inst_executed.sum"
m=$(ncu_metrics "$want")
MEGAMOE_BENCH_ONLY=30B timeout $(to 60 5) ncu --clock-control none -k 'regex:^grouped_gemm_fp8w(_rc)?$' \
  --launch-skip 2 --launch-count 4 --metrics "$m" --csv $B/fp8_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
ncu_table $OUT/r/ncu.csv | sed 's/average_warp_latency_issue_//g'
echo "total $(el) s"

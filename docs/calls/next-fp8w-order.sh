#!/usr/bin/env bash
# Forty-fourth session (any card; an H200 preferred): the FP8 128 x 256 GEMM with its two consumer warpgroups'
# column halves in strict turn (`grouped_gemm_fp8w_ord1..3`: a warpgroup issues a half only after the other's
# half has handed over, after 1 / 2 / 3 of its 4 wgmma). b98 = main's fp8 test binary and bench (`fp8_bench`).
# Carry [".dev/b98"].
# Hypothesis (docs/NOTES.md 2026-12-06g): the two warpgroups run in lockstep (both wait on the same full barrier,
# issue together, their wgmma share the tensor pipe and complete together, then both promote while the pipe idles):
# tensor pipe 64% = 512 busy / (512 + ~290 idle) per pair of halves. In strict turn one promotes under the other's
# wgmma. Predicted: the plain FP8 GEMMs 1.10-1.25x faster (tensor pipe 64% -> 75-80%) if the pipe shares round
# robin between warps; ~0.97-1.0x if it is already FIFO (then the lockstep is not the cause).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b98
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b98/main
BOUND=${BOUND:-560}
t fp8 60 400 gemm_wide
for sh in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$sh timeout $(to 150 150) $B/fp8_bench --bench > $OUT/r/fp8_bench_$sh.txt 2>&1
  echo "== fp8_bench $sh rc $? at $(el) s"
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_$sh.txt | sed -E 's/RESULT fp8 ([^ ]+) (.*) M=.*FP8 ([0-9]+ us).*128 x 256 tiles ([0-9]+ us).*strict turn(.*)/  \1 \2: staged \3, wide \4;\5/' | cut -c1-260
  grep -E "FAILED|panicked" $OUT/r/fp8_bench_$sh.txt | head -3
done
want="gpu__time_duration.sum sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
smsp__average_warp_latency_issue_stalled_barrier smsp__average_warp_latency_issue_stalled_long_scoreboard
smsp__average_warp_latency_issue_stalled_wait smsp__average_warp_latency_issue_stalled_dispatch_stall smsp__inst_executed.sum"
m=$(ncu_metrics "$want")
MEGAMOE_BENCH_ONLY=30B timeout $(to 150 10) ncu --clock-control none -k 'regex:^grouped_gemm_fp8w(_ord[123])?$' \
  --launch-skip 4 --launch-count 8 --metrics "$m" --csv $B/fp8_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
ncu_table $OUT/r/ncu.csv | sed 's/average_warp_latency_issue_//g'
echo "total $(el) s"

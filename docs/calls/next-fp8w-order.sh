#!/usr/bin/env bash
# Forty-fourth session (any card; an H200 preferred): the FP8 128 x 256 GEMM with its two consumer warpgroups'
# column halves in strict turn (`grouped_gemm_fp8w_ord1..3`: a warpgroup issues a half only after the other's
# half has handed over, after 1 / 2 / 3 of its 4 wgmma). b98 = main's fp8 test binary and bench (`fp8_bench`);
# b99 = the same from branch fp8w-ord-all (every 128 x 256 FP8 kernel of the layer with ORDER = 2): its layer
# forward line against b98's, and its whole fp8 test binary. Carry [".dev/b98", ".dev/b99"].
# Hypothesis (docs/NOTES.md 2026-12-06g): the two warpgroups run in lockstep (both wait on the same full barrier,
# issue together, their wgmma share the tensor pipe and complete together, then both promote while the pipe idles):
# tensor pipe 64% = 512 busy / (512 + ~290 idle) per pair of halves. In strict turn one promotes under the other's
# wgmma. Predicted: the plain FP8 GEMMs 1.10-1.25x faster (tensor pipe 64% -> 75-80%) if the pipe shares round
# robin between warps; ~0.97-1.0x if it is already FIFO (then the lockstep is not the cause).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b98
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
for f in b99/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
B=b98/main
BOUND=${BOUND:-570}
t fp8 60 450 gemm_wide
for run in b98:30B b99:30B b98:235B; do
  b=${run%%:*}; sh=${run#*:}
  MEGAMOE_BENCH_ONLY=$sh timeout $(to 120 200) $b/main/fp8_bench --bench > $OUT/r/fp8_bench_${b}_$sh.txt 2>&1
  echo "== fp8_bench $b $sh rc $? at $(el) s"
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_${b}_$sh.txt | sed -E 's/RESULT fp8 ([^ ]+) (.*) M=.*FP8 ([0-9]+ us).*128 x 256 tiles ([0-9]+ us).*strict turn(.*)/  \1 \2: staged \3, wide \4;\5/' | cut -c1-260
  grep -E "RESULT fp8 .*(layer|SwiGLU)" $OUT/r/fp8_bench_${b}_$sh.txt | cut -c1-220
  grep -E "FAILED|panicked" $OUT/r/fp8_bench_${b}_$sh.txt | head -3
done
want="gpu__time_duration.sum sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
smsp__average_warp_latency_issue_stalled_barrier smsp__average_warp_latency_issue_stalled_long_scoreboard
smsp__average_warp_latency_issue_stalled_wait smsp__average_warp_latency_issue_stalled_dispatch_stall smsp__inst_executed.sum"
m=$(ncu_metrics "$want")
MEGAMOE_BENCH_ONLY=30B timeout $(to 120 160) ncu --clock-control none -k 'regex:^grouped_gemm_fp8w(_ord[123])?$' \
  --launch-skip 4 --launch-count 8 --metrics "$m" --csv $B/fp8_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
ncu_table $OUT/r/ncu.csv | sed 's/average_warp_latency_issue_//g'
B=b99/main
t fp8 150 5
echo "total $(el) s"

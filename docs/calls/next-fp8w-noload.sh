#!/usr/bin/env bash
# Forty-seventh session (any card; on an H200 issue 4's rotation follows): what the 128 x 256 FP8 GEMM reaches with
# no TMA traffic beside its wgmma. The scale-order twins lost (2026-12-06j call 1: `_sl` 0.988x / 1.006x, half 0
# still ~390 cycles against half 1's ~305). `_probe2` (halves straight, no promotion) ran ~1130 cycles a 128-deep
# block, where one shared-memory port of 128 B/clk would put it if the wgmma's operand reads (A 2 KB + B 4 KB per
# m64n128k32: 96 KB a block for both warpgroups) and the TMA's writes (48 KB a block) share it. b115 = main + the
# no-load probes (`_nl`, `_probe2_nl`, `_nl_timeline`: the producer stops loading after the ring's first fill).
# Predicted if shared memory's port is the bound: probe2_nl 1.08-1.12x probe2 (reads alone fit; the tensor rate
# bounds it), wide_nl 1.1-1.2x the wide kernel with half 0's service falling toward half 1's; ncu's shared-memory
# bank reads + writes near their peak in probe2. If wide_nl is within 3% of the wide kernel, the data path is not
# what the wide kernel loses to: its own issue order is.
# Carry [".dev/b115"] (+ ".dev/b113" for the rotation on an H200), ~3.5 min (+2.5 on an H200).
O=$OUT; here=$(dirname "$0")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $gpu"
. "$here/prelude.sh" b115
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b115/main
BOUND=${BOUND:-260}
for sh in 30B 235B; do
  MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=$sh timeout $(to 70 100) $B/fp8_bench --bench > $OUT/r/fp8_bench_$sh.txt 2>&1
  echo "== fp8_bench $sh rc $? at $(el) s"
  grep -E "RESULT fp8-timeline.*(WideTimeline|NoLoad)|FAILED|panicked" $OUT/r/fp8_bench_$sh.txt | cut -c1-330
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_$sh.txt | grep -oE "^RESULT fp8 [^:]*|128 x 256 tiles [0-9]+ us|halves straight [0-9]+ us|no-load.*" | paste -sd' ' | sed 's/RESULT fp8/\n /g'
done
for f in $OUT/r/timeline*WideTimeline.bin $OUT/r/timeline*NoLoadTimeline.bin; do python3 ../benches/fp8w_timeline.py "$f" | head -4; done
want="gpu__time_duration.sum sm__cycles_elapsed.avg.per_second
sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed
l1tex__throughput.avg.pct_of_peak_sustained_elapsed lts__t_sectors.avg.pct_of_peak_sustained_elapsed
lts__throughput.avg.pct_of_peak_sustained_elapsed"
m=$(ncu_metrics "$want")
MEGAMOE_BENCH_ONLY=30B timeout $(to 100 5) ncu --clock-control none -k 'regex:^grouped_gemm_fp8w(_probe2|_nl|_probe2_nl)?$' \
  --launch-skip 4 --launch-count 8 --metrics "$m" --csv $B/fp8_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
ncu_table $OUT/r/ncu.csv | sed 's/pct_of_peak_sustained_elapsed/pct/g'
echo "total $(el) s"
case ${FORCE_GPU:-$gpu} in
  *H200*) OUT=$O/rot ROT=b113 BOUND=${ROT_BOUND:-300} bash $here/next-rotation.sh;;
esac

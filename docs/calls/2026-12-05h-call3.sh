#!/usr/bin/env bash
# Thirty-third session, call 3: the epilogue-warps gathering producer (`Gather::InProducer`, kernel
# grouped_gemm_swiglu_ew7_gather_dyn) against the overlapped default, now alternating within one run (b58 = main
# 4df4110 + the layer bench's alt forward moved to phase 2 and an in-producer variant). Call 2 had it 5-20% slower
# than the overlapped default (2754-3313 us against 2506-2629), far off the predicted 2360-2420 us. Then ncu of
# GEMM1 in each form (overlapped: _ew7_mv_dyn; in-producer: _ew7_gather_dyn and, static walk, _ew7_gather; pass:
# _ew7_dyn): the time, bytes and stalls that say why. Carry [".dev/b58"].
. "$(dirname "$0")/prelude.sh" b58
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b58/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for v in overlapped in-producer; do
  f=$OUT/r/layer_$v.txt
  MEGAMOE_GATHER=$v MEGAMOE_BENCH_ONLY=30B timeout $(to 80 200) $B/layer --bench > $f 2>&1
  echo "== layer $v rc $? at $(el) s"
  grep -h "^RESULT megamoe forward Q\|^RESULT megamoe forward, x gathered\|^RESULT megamoe forward, two launches\|^RESULT megamoe forward+backward (z saved, bf16 weight gradients) Q" $f | cut -c1-260
done
want="gpu__time_duration.sum sm__cycles_elapsed.avg sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
dram__bytes_read.sum dram__bytes_write.sum lts__t_bytes.sum lts__t_sector_hit_rate.pct smsp__inst_executed.sum
smsp__average_warp_latency_issue_stalled_barrier smsp__average_warp_latency_issue_stalled_long_scoreboard
smsp__average_warp_latency_issue_stalled_lg_throttle smsp__average_warp_latency_issue_stalled_membar
smsp__average_warp_latency_issue_stalled_sleeping smsp__average_warp_latency_issue_stalled_mio_throttle
l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum
launch__grid_size launch__registers_per_thread"
m=$(ncu_metrics "$want")
for c in "overlapped dynamic" "in-producer dynamic" "in-producer static" "pass dynamic"; do
  set -- $c
  MEGAMOE_GATHER=$1 MEGAMOE_GEMM_SCHED=$2 MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B \
    timeout $(to 90 20) ncu -k 'regex:grouped_gemm_swiglu' --launch-skip 1 --launch-count 2 --metrics "$m" --csv \
    $B/layer --bench > $OUT/r/ncu_$1_$2.csv 2> $OUT/r/ncu_$1_$2.err
  echo "== ncu $1 $2 rc $? at $(el) s"; tail -2 $OUT/r/ncu_$1_$2.err
  python3 - $OUT/r/ncu_$1_$2.csv <<'P'
import csv, sys, collections
rows = [x for x in csv.reader(open(sys.argv[1])) if len(x) > 10]
if rows:
    h = rows[0]; i, k, m, v = (h.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Value"))
    by = collections.OrderedDict()
    for x in rows[1:]: by.setdefault((x[i], x[k]), {})[x[m]] = x[v]
    for (i, k), d in by.items():
        print(" ", i, k[:60]); print("   ", "; ".join(f"{a.split('__')[-1]}={b}" for a, b in d.items()))
P
done
echo "total $(el) s"

#!/usr/bin/env bash
# Thirty-fifth session, call 5: the dh + SwiGLU backward's write-out of dy's rows (for dW2) S7 - 1 = 3 k-steps
# behind its `cp.async` groups instead of 2 (b66/lag; b66/base = b65's layer bench, main d0c6de8 + heat). Waiting
# for the group of k-step kt - 2 capped the gathering producer at two k-steps a copy latency (~1.5 us for ~0.84 us
# of the consumers' work): the kernel measured 1068 us with the write-out against 892 without (call 1).
# Predicted: in_producer_dy tests bitwise as before; the dh gathering kernel 1068 -> ~950-1000 us under ncu.
# Carry [".dev/b66"], bound 150 s.
BOUND=150
. "$(dirname "$0")/prelude.sh" b66
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
B=b66/lag
t layer_forward 40 100 in_producer_dy
m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__bytes_write.sum"
for v in b66/base b66/lag; do
  n=$(basename $v)
  MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B timeout $(to 50 5) ncu \
    -k 'regex:bt_dswiglu_ew7_gather' --launch-count 2 --metrics "$m" --csv $v/layer --bench \
    > $OUT/r/ncu_$n.csv 2> $OUT/r/ncu_$n.err
  echo "== ncu $n rc $? at $(el) s"
  ncu_table $OUT/r/ncu_$n.csv | sed -E 's/pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed/tensor/'
done
echo "total $(el) s"

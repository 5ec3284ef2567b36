#!/usr/bin/env bash
# Thirty-fourth session, call 7: why the whole-tile-staged f32 weight gradients lost (call 6: dW2 0.58 / 0.63 of
# cuBLAS dense at 128 x 192 / 128 x 128 against 0.73 at 128 x 256). Hypothesis: the ring's time ahead shrank
# (bytes in the ring not held by the consumers, over the bytes a microsecond the tile consumes: 256 ~1.1 us,
# 192 ~0.4 us, 128 ~0.8 us), so the consumers wait on full stages. ncu of dW2's kernel in each width (cluster form,
# the default schedule): expected the 192 / 128 forms' long-scoreboard or sleeping stalls (the consumers' mbarrier
# waits) well above the 256 form's, tensor pipe lower, DRAM and L2 bytes about equal. Carry [".dev/b62"].
. "$(dirname "$0")/prelude.sh" b62
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b62/main
BOUND=${BOUND:-120}
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
want="gpu__time_duration.sum sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
smsp__average_warp_latency_issue_stalled_barrier smsp__average_warp_latency_issue_stalled_long_scoreboard
smsp__average_warp_latency_issue_stalled_sleeping smsp__average_warp_latency_issue_stalled_wait
smsp__average_warp_latency_issue_stalled_math_pipe_throttle dram__bytes_read.sum lts__t_bytes.sum smsp__inst_executed.sum"
m=$(ncu_metrics "$want")
for w in 256 192 128; do
  MEGAMOE_WGRAD_TILE=$w MEGAMOE_BENCH_PART=wgrad MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout $(to 40 5) ncu \
    -k 'regex:grouped_wgrad_f32' --launch-skip 3 --launch-count 1 --metrics "$m" --csv $B/gemm --bench \
    > $OUT/r/ncu_$w.csv 2> $OUT/r/ncu_$w.err
  echo "== ncu $w rc $? at $(el) s"; tail -1 $OUT/r/ncu_$w.err
  ncu_table $OUT/r/ncu_$w.csv | sed 's/average_warp_latency_issue_//g'
done
echo "total $(el) s"

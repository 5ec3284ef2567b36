#!/usr/bin/env bash
# Prepared in the thirty-third session (not run): two knobs of the gathering producers, both off by default.
# (1) `MEGAMOE_GATHER_AHEAD=1`: the look-ahead tile hand-off (thread 0 takes tile j + 1 at tile j's start, every
# thread reads its token mid-tile; one barrier between tiles instead of a counter, a global load and two barriers in
# series). Predicted: GEMM1's gathering kernel from 1.34 toward 1.25-1.28 ms (the TMA form's 1.25), the forward
# 2-4% faster alternating (the bench's "look-ahead hand-off on" line). If so: default on (host/src/gemm.rs
# `gather_ahead`: ("", true)).
# (2) dy gathered in the dh + SwiGLU backward's producer
# (`grouped_gemm_bt_dswiglu_ew7_gather[_dyn]`, `MEGAMOE_DY_GATHER=producer`, off by default; with the in-producer
# gather of x, the default): the tiles of n-tile 0 also write the gathered rows in expert order for dW2 (each
# thread its own chunks, two k-steps behind its cp.async copies), so no gather pass of dy runs. b60 = that
# session's last main. Carry [".dev/b60"] (~7.5 min).
# Predicted: tests bitwise the pass; under ncu the gathering dh kernel 0-8% slower than `_ew7_dyn` (GEMM1's
# gathering form ran 1.34 against 1.25 ms) while the dy gather pass (~200-240 us) is gone: the 30B step (z saved,
# bf16 weight gradients) 1.5-2.5% faster alternating ("dy gathered in the dh GEMM's producer" line). If so, make
# it the default (host/src/gemm.rs `dy_gather_in_producer`: ("", true); README).
. "$(dirname "$0")/prelude.sh" b60
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b60/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t layer_forward 100 420 in_producer
grep -h "rel err" $OUT/r/t_layer_forward.txt | head -4
for tool in memcheck synccheck; do
  for name in in_producer_dy_ragged_save_z in_producer_dy_masked_static in_producer_ahead_ragged_save_z \
      in_producer_ahead_half_empty_static; do
    timeout $(to 60 400) compute-sanitizer --tool $tool --error-exitcode 3 $B/layer_forward $name \
      --exact --include-ignored --test-threads=1 > $OUT/r/${tool}_$name.txt 2>&1
    echo "== $tool $name rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/${tool}_$name.txt | tr '\n' ' ')"
  done
done
m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum"
for c in "pass 0" "producer 0" "producer 1"; do
  set -- $c; dy=$1-$2
  MEGAMOE_DY_GATHER=$1 MEGAMOE_GATHER_AHEAD=$2 MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B timeout $(to 70 300) ncu \
    -k 'regex:swiglu|gather_rows' --launch-skip 2 --launch-count 6 --metrics "$m" --csv $B/layer --bench \
    > $OUT/r/ncu_$dy.csv 2> $OUT/r/ncu_$dy.err
  echo "== ncu dy $dy rc $? at $(el) s"; tail -1 $OUT/r/ncu_$dy.err
  ncu_table $OUT/r/ncu_$dy.csv
done
for r in 1 2; do
  f=$OUT/r/layer_$r.txt
  MEGAMOE_BENCH_ONLY=30B timeout $(to 75 150) $B/layer --bench > $f 2>&1
  echo "== layer $r rc $? at $(el) s"
  grep -h "^RESULT megamoe forward Q\|^RESULT megamoe forward, x gathered\|dy gathered\|look-ahead\|^RESULT megamoe forward+backward (z saved, bf16 weight gradients) Q" $f | cut -c1-300
done
MEGAMOE_DY_GATHER=producer timeout $(to 150 5) $B/layer_backward --include-ignored --test-threads=1 > $OUT/r/t_layer_backward_dy.txt 2>&1
echo "== layer_backward (dy in producer) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_backward_dy.txt)"
grep -hE "FAILED|panicked|\.\.\. $" $OUT/r/t_layer_backward_dy.txt | cut -c1-300 | head -6
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the thirty-fourth session (not run): dW2's A (dy's rows) gathered by the weight gradient's own producer
# warpgroup (`MEGAMOE_WGRAD_GATHER=1`, off by default: `grouped_wgrad_{f32,bf16}_ga[_mc]`, kernels/grouped_wgrad.rs
# `produce_gather`: 128 threads, eight 16-byte `cp.async` each a k-step, the next k-step's row slots loaded one
# k-step ahead, the token by a multiply-shift (scheduler.rs `FastDiv`)). With it the dh + SwiGLU backward writes no
# expert-ordered copy of dy (537 MB at 30B) and dW2 reads none; dx's sum over slots runs whole in dW1's idle warps
# (dW2's are busy gathering). Binaries: b63 = main with it (`BDIR=/work/main/.dev/b63 bash
# docs/calls/2026-12-04c-build.sh main layer_forward layer_backward graph ep`). Carry [".dev/b63"] (~8 min).
# Predicted: tests bitwise (the pass's backward; the copy's dW and dx); under ncu the dh kernel ~5-10% shorter
# (1.12 GB of writes -> ~0.58), dW2 within +-5% of the copy's (its A from L2: each dy row read 8x, ~67 MB from
# DRAM, against 537 MB), dW1 unchanged or up to ~3% longer (the whole dx sum in its warps); the 30B step
# (z saved) 1.0-2.0% faster alternating (the bench's "dW2's A gathered in its producer" line, bf16 and f32 weight
# gradients). If so: default on (host/src/gemm.rs `wgrad_gather`: ("", true); README).
. "$(dirname "$0")/prelude.sh" b63
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b63/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t layer_forward 120 420 in_producer_wgrad_gather
t layer_backward 60 380 wgrad_gather
for tool in memcheck synccheck; do
  for name in in_producer_wgrad_gather_ragged_save_z in_producer_wgrad_gather_masked_static; do
    timeout $(to 60 330) compute-sanitizer --tool $tool --error-exitcode 3 $B/layer_forward $name \
      --exact --include-ignored --test-threads=1 > $OUT/r/${tool}_$name.txt 2>&1
    echo "== $tool $name rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/${tool}_$name.txt | tr '\n' ' ')"
  done
done
m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum"
for on in 0 1; do
  MEGAMOE_WGRAD_GATHER=$on MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B timeout $(to 70 250) ncu \
    -k 'regex:grouped_wgrad|dswiglu' --launch-skip 3 --launch-count 4 --metrics "$m" --csv $B/layer --bench \
    > $OUT/r/ncu_$on.csv 2> $OUT/r/ncu_$on.err
  echo "== ncu wgrad gather $on rc $? at $(el) s"; tail -1 $OUT/r/ncu_$on.err
  ncu_table $OUT/r/ncu_$on.csv
done
for r in 1 2; do
  f=$OUT/r/layer_$r.txt
  MEGAMOE_BENCH_ONLY=30B timeout $(to 75 110) $B/layer --bench > $f 2>&1
  echo "== layer $r rc $? at $(el) s"
  grep -h "^RESULT megamoe forward Q\|dW2's A gathered\|^RESULT megamoe forward+backward (z saved, bf16 weight gradients) Q" $f | cut -c1-300
done
MEGAMOE_WGRAD_GATHER=1 timeout $(to 170 5) $B/layer_backward --include-ignored --test-threads=1 > $OUT/r/t_layer_backward_ga.txt 2>&1
echo "== layer_backward (dW2 gathering) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_backward_ga.txt)"
grep -hE "FAILED|panicked|\.\.\. $" $OUT/r/t_layer_backward_ga.txt | cut -c1-300 | head -6
echo "total $(el) s"

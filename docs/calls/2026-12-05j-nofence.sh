#!/usr/bin/env bash
# Thirty-fifth session: the gathering consumers without their per-k-step `fence.proxy.async` (CUTLASS's sm90 cp.async
# GMMA mainloop and quack's gather_A wait on the mbarrier that `cp.async.mbarrier.arrive.noinc` completes and issue
# wgmma with no proxy fence). b64/nofence = main 7ae8855 minus the fence in `mainloop_coop` (GATHER) and the weight
# gradients' `kstep` (GA); b63/main has it. Carry [".dev/b63", ".dev/b64"].
# Predicted: tests bitwise as before; if the fence drains the in-flight wgmma: dW2's gathering kernel 979 -> ~830-870
# us under ncu, GEMM1's and dh's gathering kernels 2-8% shorter, the forward 2-5% faster; if it is cheap: all within 1%.
. "$(dirname "$0")/prelude.sh" b63
for f in b64/*/*.gz; do gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
B=b64/nofence
t layer_forward 150 400
MEGAMOE_WGRAD_GATHER=1 timeout $(to 80 380) $B/layer_backward wgrad_gather --include-ignored --test-threads=1 > $OUT/r/t_lb_ga.txt 2>&1
echo "== layer_backward gather (WGRAD_GATHER=1) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_lb_ga.txt)"
grep -hE "FAILED|panicked" $OUT/r/t_lb_ga.txt | head -4
m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,dram__bytes_read.sum"
for v in b63/main b64/nofence; do
  n=$(basename $v)
  MEGAMOE_WGRAD_GATHER=1 MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B timeout $(to 70 250) ncu \
    -k 'regex:gather|grouped_wgrad' --launch-skip 4 --launch-count 8 --metrics "$m" --csv $v/layer --bench \
    > $OUT/r/ncu_$n.csv 2> $OUT/r/ncu_$n.err
  echo "== ncu $n rc $? at $(el) s"; tail -1 $OUT/r/ncu_$n.err
  ncu_table $OUT/r/ncu_$n.csv | sed -E 's/pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed/tensor/'
done
for r in 1 2; do
  for v in b63/main b64/nofence; do
    f=$OUT/r/layer_$(basename $v)_$r.txt
    MEGAMOE_BENCH_ONLY=30B timeout $(to 75 20) $v/layer --bench > $f 2>&1
    echo "== layer $v $r rc $? at $(el) s"
    grep -h "^RESULT megamoe forward Q\|dW2's A gathered\|^RESULT megamoe forward+backward (z saved, bf16 weight gradients) Q" $f | cut -c1-240
  done
done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the thirty-sixth session (not run). The gathering kernels' L2 hints: evict-last on the token rows they
# read (`MEGAMOE_L2_GATHER=quarter|half|all`: createpolicy.fractional + cp.async .L2::cache_hint on 64 / 128 / 255 of
# 255 reads; GEMM1's x in `grouped_gemm_swiglu_ew7_gather_dyn`, the dh GEMM's dy in
# `grouped_gemm_bt_dswiglu_ew7_gather_dyn`) and evict-first on what they stream (`MEGAMOE_L2_STREAM=first`: GEMM1's
# h and z stores; the dh kernel's z loads, dz and s h stores; not its write-out of dy's rows); and the same two on
# the movers of dx's side copy of x's rows for dW1 (`grouped_gemm_bt_bf16_cpx_l2`: x read ~8 times, the copy stored). Why: each token row is read once for each of its 8 experts at times
# spread over the kernel, and x (67 MB at 30B) does not stay in L2 beside W1 (805 MB streamed) and h (201 MB
# written): GEMM1's gathering kernel read 1.31 GB from DRAM against x + W1 = 0.87 GB (ncu, H100, 2026-12-05h call 3).
# Under the 700 W cap bytes cost joules (~0.13 J a GB) and joules are time.
# b69 = main 76526e9 (the knobs, its tests, the layer bench's alternating lines; see NOTES 2026-12-05k). Carry [".dev/b69"]
# (~9 min, bound 565 s).
# The hints run in kernels of their own (`_gather_l2_dyn`): the default kernels' SASS is the same as before them.
# ptxas keeps the evict-last fraction in sixteenths; if the marked reads are drawn per access, a row read 8 times
# ends marked with probability 1 - (1 - f)^8 (40% at a sixteenth, 90% at a quarter), so the ncu runs take a
# sixteenth, a quarter and all, and a quarter with 30 MB of persisting set-aside (MEGAMOE_BENCH_L2_PERSIST_MB: if
# evict-last needs the set-aside, only that run's bytes fall). The layer bench resets the L2's persisting lines after every pass
# (cuCtxResetPersistingL2Cache; a WARNING line if the driver refuses).
# Predicted: tests bitwise the pass (a hint moves no value). ncu, 30B: GEMM1's gathering kernel's DRAM reads 1.31 GB
# (off) -> 1.05-1.20 GB (sixteenth / quarter), its time -1..-4%; the dh kernel's reads fall less (it also writes dy's
# 537 MB expert-ordered copy, which evicts); `all` (67 MB of evict-last lines, more than the 50 MB L2) may raise W1's
# re-reads instead (the normal lines, the 2-3 experts' W1 slices in flight, evicted first): its reads tell. The
# layer bench alternates four settings with off/off (sixteenth, quarter, quarter + streams, streams alone): forward 1.01-1.02x, step 1.005-1.015x at the better one (the
# evict-last lines outlive the kernel: if later kernels lose L2 to them, the step shows it). What it decides: land
# the better fraction as the default if the forward gains >= 1% in the layer bench and the ncu bytes fall; else
# retire the knob. Caveat of the alternating lines: evict-last lines left by a hinted pass can serve (or crowd) the
# next unhinted pass (the same x), so the layer lines understate or blur the difference; ncu flushes L2 before each
# profiled launch (its default cache control), so its bytes are clean.
. "$(dirname "$0")/prelude.sh" b69
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
B=b69/main
t layer_forward 70 430 in_producer_l2; mv $OUT/r/t_layer_forward.txt $OUT/r/t_layer_forward_l2.txt
m="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
# the last run: a quarter again with 30 MB of L2 set aside for persisting lines (whether evict-last needs it)
for v in off/off/0 sixteenth/off/0 quarter/off/0 all/off/0 quarter/first/0 quarter/off/30; do
  g=${v%%/*}; r=${v#*/}; st=${r%/*}; mb=${r#*/}; n=${g}_${st}_$mb
  MEGAMOE_BENCH_L2_PERSIST_MB=$mb MEGAMOE_L2_GATHER=$g MEGAMOE_L2_STREAM=$st MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B \
    timeout $(to 60 100) ncu -k 'regex:ew7_gather|bt_bf16_cpx' --launch-skip 2 --launch-count 10 --metrics "$m" --csv \
    $B/layer --bench > $OUT/r/ncu_$n.csv 2> $OUT/r/ncu_$n.err
  echo "== ncu gather $g stream $st set-aside $mb MB rc $? at $(el) s"; grep -h "L2 persisting" $OUT/r/ncu_$n.csv
  ncu_table $OUT/r/ncu_$n.csv | sed -E 's/pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed/tensor/'
done
for r in 1; do
  MEGAMOE_BENCH_ONLY=30B timeout $(to 100 5) $B/layer --bench > $OUT/r/layer_$r.txt 2>&1
  echo "== layer $r rc $? at $(el) s"
  grep -h "L2 hints\|RESULT megamoe forward Qwen\|bf16 weight gradients) Qwen" $OUT/r/layer_$r.txt | cut -c1-360
done
echo "total $(el) s"

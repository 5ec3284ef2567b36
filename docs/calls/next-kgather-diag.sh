#!/usr/bin/env bash
# Prepared in the thirty-fifth session (not run): why the gathering dW2 (docs/wip/wgrad-gather.patch, retired in
# 2026-12-05j: dW2 979 us against the copy's 829 under ncu, tensor 54% against 67%, 41% more instructions) is slow,
# and whether loading the row slots two k-steps ahead (v1: docs/wip/wgrad-gather-ahead2.patch on top) or an L2
# prefetch of A's rows four k-steps ahead of their copies (v2: docs/wip/wgrad-gather-l2pf.patch on top) helps.
# Binaries: b67/v0 = main 25c0287 + wgrad-gather.patch, b67/v1 = v0 + ahead2, b67/v2 = v0 + l2pf (rebuild: a worktree
# of main, `git apply` the patch(es), `ln -s /work/main/.tools .tools`, then `CARGO_TARGET_DIR=... BDIR=/work/main/.dev/b67
# bash docs/calls/2026-12-04c-build.sh v0 layer_forward layer_backward`). Carry [".dev/b67"] (~6 min, bound 565 s).
# Predicted: v1's and v2's tests bitwise (the copy's dW, the pass's backward). v0 reads A ~7x dy from DRAM at random
# (690 MB against the copy's 925 with B and its own A) with only STAGES - 1 = 3 k-steps (~2.4 us) of copies in
# flight, about one loaded DRAM latency: if that is the cause, v2's dW2 ~830-880 us (the copy's 829) and the step
# 1-2% faster than the default; if the one-k-step index chain is, v1 likewise; if neither, both within 2% of v0's
# and the full profile's stall reasons say where the producer waits
# (long scoreboard on the row_slot LDG: the index chain; LGSB / MIO throttle on LDGSTS: the copies' issue; a busy
# mbarrier try_wait in the producer: the ring is full and the producer is not the limit). The single-CTA form
# (MEGAMOE_WGRAD_SCHED=dynamic) tells whether the 2-CTA pair's coupling (each k-step waits for both CTAs' gathers)
# costs it.
. "$(dirname "$0")/prelude.sh" b67
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for v in v2 v1; do
  B=b67/$v
  MEGAMOE_WGRAD_GATHER=1 t layer_backward 60 440 wgrad_gather; mv $OUT/r/t_layer_backward.txt $OUT/r/t_layer_backward_$v.txt
  t layer_forward 40 420 in_producer_wgrad_gather; mv $OUT/r/t_layer_forward.txt $OUT/r/t_layer_forward_$v.txt
done
m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct"
for v in "v0 clusters" "v1 clusters" "v2 clusters" "v2 dynamic"; do
  set -- $v
  MEGAMOE_WGRAD_SCHED=$2 MEGAMOE_WGRAD_GATHER=1 MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B \
    timeout $(to 60 200) ncu -k 'regex:grouped_wgrad' --launch-skip 2 --launch-count 4 --metrics "$m" --csv \
    b67/$1/layer --bench > $OUT/r/ncu_$1_$2.csv 2> $OUT/r/ncu_$1_$2.err
  echo "== ncu $1 $2 rc $? at $(el) s"
  ncu_table $OUT/r/ncu_$1_$2.csv | sed -E 's/pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed/tensor/'
done
for v in v2 v1; do
  MEGAMOE_BENCH_ONLY=30B timeout $(to 75 100) b67/$v/layer --bench > $OUT/r/layer_$v.txt 2>&1
  echo "== layer $v rc $? at $(el) s"
  grep -h "dW2's A gathered" $OUT/r/layer_$v.txt | cut -c1-300
done
# the full profile of one gathering dW2 and one copy-fed dW2 (v0): details and per-SASS-instruction stall samples
for k in "ga grouped_wgrad_f32_ga_mc 1" "mv grouped_wgrad_f32_mv_mc 0"; do
  set -- $k
  MEGAMOE_WGRAD_GATHER=$3 MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B timeout $(to 90 10) ncu \
    -k "regex:^$2\$" --launch-count 1 --set full --import-source no -o $OUT/prof_$1 b67/v0/layer --bench \
    > $OUT/r/ncu_full_$1.txt 2>&1
  echo "== ncu --set full $2 rc $? at $(el) s"
  ncu --import $OUT/prof_$1.ncu-rep --page details > $OUT/r/ncu_details_$1.txt 2>&1
  ncu --import $OUT/prof_$1.ncu-rep --page source --print-source sass --csv > $OUT/r/ncu_sass_$1.csv 2>&1
  rm -f $OUT/prof_$1.ncu-rep
  grep -E "Duration|Warp Cycles Per Issued|No Eligible|L2 Hit" $OUT/r/ncu_details_$1.txt | head -6
  python3 ../benches/sass_stalls.py $OUT/r/ncu_sass_$1.csv 15
done
echo "total $(el) s"

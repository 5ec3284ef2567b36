#!/usr/bin/env bash
# Thirty-fourth session, call 5: GEMM1's gathering kernel (`grouped_gemm_swiglu_ew7_gather_dyn`) under ncu in b59
# (main 385caab: GatherRows, 297 M instructions on an H200) and b61 (main a4950d4: after the dy-in-producer
# generalisation of produce_gather and the look-ahead flag, 327 M on an H100 in call 1). Same card, same call: did
# those commits add ~30 M instructions (and time) to GEMM1 with the look-ahead off? Carry [".dev/b59", ".dev/b61"].
. "$(dirname "$0")/prelude.sh" b59
for f in b61/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
m="gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,launch__registers_per_thread"
for r in 1 2; do for b in b59 b61; do
  MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B timeout $(to 60 10) ncu -k 'regex:swiglu_ew7_gather' \
    --launch-skip 1 --launch-count 3 --metrics "$m" --csv $b/main/layer --bench > $OUT/r/ncu_${b}_$r.csv 2> $OUT/r/ncu_${b}_$r.err
  echo "== ncu $b ($r) rc $? at $(el) s"; tail -1 $OUT/r/ncu_${b}_$r.err
  ncu_table $OUT/r/ncu_${b}_$r.csv
done; done
echo "total $(el) s"

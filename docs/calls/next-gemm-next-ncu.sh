#!/usr/bin/env bash
# Prepared in the fifty-second session: a probe. ncu of the M-grouped GEMMs at Qwen3-Next's shape (H 2048, I 512,
# E 512, top-10: 320 rows an expert) and at 30B, with cuBLAS's dense GEMMs in the same runs (benches/gemm.rs
# MEGAMOE_BENCH_PART=m, one timed launch each, no heat): time, DRAM bytes read and written, L2 hit rate, tensor
# pipe. b129 = main's gemm bench; carry [".dev/b129"] (~3-4 min).
# Question (call 7: at next ours 0.64-0.74 of cuBLAS dense against 0.89-0.95 at 30B): are the fine-grained
# M-grouped GEMMs bound by their weights' bytes (each expert's W1 (4 MiB) serves 320 rows: W1 2.15 GB against GEMM1's
# 687 GFLOP, ~330 FLOP a byte; x's rows 0.67 GB, C 0.34 GB), read once or more than once?
# Predicted: GEMM1 plain at next reads 2.8-3.5 GB (ideal 2.8: W1 once and A once) at ~2.5-3 TB/s, its tensor pipe
# ~45-55%; at 30B ~1.4 GB (W1 0.8 GB, A 0.5 GB) and ~70%; cuBLAS dense reads ~0.7 GB (A, one B) at both.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b129}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
B=$BDIR/main
m="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
for run in next 30B; do
  if [ $run = next ]; then sh=(MEGAMOE_BENCH_SHAPE=2048,512,512,10); else sh=(MEGAMOE_BENCH_ONLY=30B); fi
  env "${sh[@]}" MEGAMOE_BENCH_PART=m MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 timeout $(to 120 20) \
    ncu --launch-count 40 --metrics "$m" --csv $B/gemm --bench > $OUT/r/ncu_$run.csv 2> $OUT/r/ncu_$run.err
  echo "== ncu $run rc $? at $(el) s"
  ncu_table $OUT/r/ncu_$run.csv | sed -E 's/gpu__time_duration.sum=/t=/; s/dram__bytes_read.sum=/rd=/; s/dram__bytes_write.sum=/wr=/; s/lts__t_sector_hit_rate.pct=/L2hit=/' | cut -c1-200 | head -40
  tail -2 $OUT/r/ncu_$run.err | cut -c1-200
done
echo "total $(el) s"

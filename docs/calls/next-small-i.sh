#!/usr/bin/env bash
# Prepared in the fifty-third session (not run: the device time ran out): where the small-I backward stands (item
# (E) of docs/NOTES.md's list; SonicMoE's 7B n=256 backward ~404 TFLOP/s against ours ~300 after the side-copy
# rule). The gemm bench at (H, I, E, k) = (1536, 256, 128, 8), T = 16384 (MEGAMOE_BENCH_SHAPE): every GEMM
# alternating with cuBLAS's dense GEMM of the same total size, then ncu of the M-grouped GEMMs and the weight
# gradients there (one launch each: time, DRAM bytes, L2 hit rate, tensor pipe). b136 = main's gemm bench; carry
# [".dev/b136"] (~5 min, BOUND=500).
# Floors at this shape (T k = 131072 rows): dh + SwiGLU 103 GFLOP (0.16 ms at 650 TFLOP/s) against its bytes
# (dy's rows 403 MB gathered and written for dW2, z 134 MB in, dz 134 MB and s h 67 MB out: ~0.35 ms at 3.35 TB/s);
# the weight gradients 309 GFLOP (0.48 ms) against x's rows 403 MB, dz 134, dy's rows 403, s h 67 in and 302 MB out (bf16)
# (~0.4 ms). Predicted: dh + SwiGLU and the weight gradients at their bytes plus a share of their FLOPs (not
# overlapped), 0.4-0.6 of cuBLAS's dense rate; DRAM reads of the weight gradients ~1.0-1.5 GB.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b136}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-500}
B=$BDIR/main
SH=MEGAMOE_BENCH_SHAPE=1536,256,128,8
env $SH timeout $(to 150 200) $B/gemm --bench > $OUT/r/gemm_small_i.txt 2>&1
echo "== gemm bench rc $? at $(el) s"; alt_of gemm_small_i
m="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed"
for part in m wgrad; do
  env $SH MEGAMOE_BENCH_PART=$part MEGAMOE_BENCH_REPS=1 MEGAMOE_BENCH_HEAT=0 timeout $(to 120 20) \
    ncu --launch-count 40 --metrics "$m" --csv $B/gemm --bench > $OUT/r/ncu_$part.csv 2> $OUT/r/ncu_$part.err
  echo "== ncu $part rc $? at $(el) s"
  ncu_table $OUT/r/ncu_$part.csv | sed -E 's/gpu__time_duration.sum=/t=/; s/dram__bytes_read.sum=/rd=/; s/dram__bytes_write.sum=/wr=/; s/lts__t_sector_hit_rate.pct=/L2hit=/' | cut -c1-200 | head -40
  tail -2 $OUT/r/ncu_$part.err | cut -c1-200
done
echo "total $(el) s"

#!/usr/bin/env bash
# Sixtieth session: the narrow seven-warp SwiGLU backward (`grouped_gemm_bt_dswiglu_ew7n*`, 128 x 128 tiles,
# `MEGAMOE_DSW=ew7n`, opt-in). b139 = main + the narrow kernels: grouped_gemm and layer_forward tests, the gemm and
# layer benches. Carry [".dev/b139"] (~4 min, BOUND=${BOUND:-300}).
# Predicted: tests pass (dz bitwise the 192-column kernel's, dtopk within 1e-5). At (H, I) = (1536, 256), T = 16384:
# the dh + SwiGLU kernel 0.70-0.85x the 192-column one's time (a third fewer MMAs and B bytes, the same A reads and
# epilogue), the layer's step 0.96-0.98x (dh + SwiGLU ~15-20% of the backward at this shape).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b139
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
B=b139/main
t grouped_gemm 60 200 dswiglu ew7_dyn
t layer_forward 60 150 in_producer_dy_narrow
# the dh + SwiGLU GEMM alone (dy's rows in expert order: `_ew7[n]_dyn`), alternating processes
for d in ew7 ew7n ew7 ew7n; do
  for sh in 1536,256,128,8; do
    env MEGAMOE_DSW=$d MEGAMOE_BENCH_SHAPE=$sh MEGAMOE_BENCH_PART=m MEGAMOE_BENCH_HEAT=1 timeout $(to 40 110) \
      $B/gemm --bench > $OUT/r/gemm_${d}_${sh%%,*}.txt 2>&1
    echo "== gemm $d $sh rc $? at $(el) s: $(alt_summary $OUT/r/gemm_${d}_${sh%%,*}.txt | grep -i "swiglu backward\|dh" | tr -s ' ' | head -2 | tr '\n' '|')"
    grep -hE "FAILED|all written: false|panicked" $OUT/r/gemm_${d}_${sh%%,*}.txt | head -2
  done
done
# the layer: the step with the narrow kernel alternating with the 192-column one (the bench's "SwiGLU backward Ew7"
# line is the other's), 1536 x 256
for sh in 1536,256,128,8; do
  env MEGAMOE_DSW=ew7n MEGAMOE_BENCH_SHAPE=$sh MEGAMOE_BENCH_HEAT=1 timeout $(to 100 5) $B/layer --bench \
    > $OUT/r/layer_${sh%%,*}.txt 2>&1
  echo "== layer ew7n $sh rc $? at $(el) s"
  grep -h "^RESULT megamoe forward+backward (z saved, bf16 weight gradients)" $OUT/r/layer_${sh%%,*}.txt | cut -c1-300
  grep -hE "FAILED|panicked" $OUT/r/layer_${sh%%,*}.txt | head -3
done
echo "total $(el) s"

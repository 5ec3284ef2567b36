#!/usr/bin/env bash
# Fifty-first session, fourth call (any card): the price of the FP8 dh's epilogue. b125 = main's fp8 bench with a
# "bwd dh (plain)" line (the wide FP8 kernel at dh's shape, M = T k, N = I, K = H: the FP8 dh's main loop with a
# plain bf16 epilogue) and `MEGAMOE_BENCH_FP8_GEMM=dh` (that line alone); b124's layer bench for the FP8 dh kernel.
# In one call: the fp8 bench's dh line at 30B, ncu's time of its plain wide launches, ncu's time of the FP8 dh
# kernel in the layer bench (REPS=1). Carry [".dev/b125", ".dev/b124"].
# Predicted: the plain wide kernel at dh's shape ~470-500 us under ncu (the FP8 dx's rate), the FP8 dh ~735, so the
# SwiGLU-backward epilogue ~240-260 us of it.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b125
for f in b124/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b125/main
BOUND=${BOUND:-240}
export MEGAMOE_BENCH_ONLY=30B
MEGAMOE_BENCH_FP8_GEMM=dh timeout $(to 60 120) $B/fp8_bench --bench > $OUT/r/fp8.txt 2>&1
echo "== fp8 bench (dh line) rc $? at $(el) s"
grep -E "^RESULT fp8 " $OUT/r/fp8.txt | cut -c1-400
grep -E "FAILED|panicked" $OUT/r/fp8.txt | head -3
MEGAMOE_BENCH_FP8_GEMM=dh timeout $(to 60 60) ncu --clock-control none -k regex:"^grouped_gemm_fp8w$" \
  --launch-count 8 --metrics gpu__time_duration.sum --csv $B/fp8_bench --bench > $OUT/r/ncu1.csv 2> $OUT/r/ncu1.err
echo "== ncu plain wide at dh's shape rc $? at $(el) s"; ncu_table $OUT/r/ncu1.csv | tee $OUT/r/ncu1.txt | cut -c1-120
MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_REPS=1 timeout $(to 80 5) ncu --clock-control none -k regex:"fp8w_dswiglu_gather" \
  --launch-count 4 --metrics gpu__time_duration.sum --csv b124/main/layer_bench --bench > $OUT/r/ncu2.csv 2> $OUT/r/ncu2.err
echo "== ncu FP8 dh rc $? at $(el) s"; ncu_table $OUT/r/ncu2.csv | tee $OUT/r/ncu2.txt | cut -c1-120
echo "total $(el) s"

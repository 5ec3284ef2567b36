#!/usr/bin/env bash
# Forty-third session (any card): where the 128 x 256 FP8 GEMM's tensor pipe idles. b97 = main's fp8 bench
# (`cargo bench --bench fp8 --no-run`, as `fp8_bench`). Carry [".dev/b97"].
# ncu --set full of one 30B GEMM1-plain launch of `grouped_gemm_fp8w` (131072 x 1536 x 2048) in the fp8 bench, its
# details page and per-SASS stall samples (for benches/sass_stalls.py).
# Predicted: tensor pipe ~65% active (2026-12-03 call H: 64.7%); the idle split between the tile boundary (both
# consumer warpgroups in the epilogue at once: ~10-15% of a 30B tile's ~8200 clocks of main loop) and the
# promotions' waits in the main loop.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b97
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-330}
MEGAMOE_BENCH_ONLY=30B timeout $(to 240 30) ncu --clock-control none -k regex:"^grouped_gemm_fp8w$" --launch-skip 3 \
  --launch-count 1 --set full --import-source no -o $OUT/r/prof b97/main/fp8_bench --bench > $OUT/r/ncu_run.txt 2>&1
echo "== ncu rc $? at $(el) s"; tail -3 $OUT/r/ncu_run.txt | cut -c1-200
ncu --import $OUT/r/prof.ncu-rep --page details > $OUT/r/ncu_details.txt 2>&1
ncu --import $OUT/r/prof.ncu-rep --page source --print-source sass --csv > $OUT/r/ncu_sass.csv 2>&1
gzip $OUT/r/ncu_sass.csv $OUT/r/prof.ncu-rep 2>/dev/null
grep -E "Duration|Tensor|Issue Slots Busy|Eligible Warps|L2 Cache Throughput|Shared Memory|Stall|SM Busy" $OUT/r/ncu_details.txt | head -30
echo "total $(el) s"

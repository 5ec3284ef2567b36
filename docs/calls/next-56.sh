#!/usr/bin/env bash
# Fifty-first session, third call (any card): where the FP8 dh kernel's time goes. b124 (main after the z prefetch):
# ncu --set full of one `grouped_gemm_fp8w_dswiglu_gather` launch of the 30B layer bench (REPS=1, no heat; its
# FP8 step with `Fp8Dh::Fp8`), the details page and per-SASS stall samples (benches/sass_stalls.py reads them).
# Carry [".dev/b124"].
# Known (next-54/55.sh, an H100): the kernel 735 us under ncu against the FP8 dx's 953 us for twice the FLOPs, so
# ~260 us over its main loop at dx's rate; the z prefetch took 34 us of it. Predicted: tensor pipe ~45% active;
# the stall samples near the epilogue's STS / UTMASTG / BAR (the named barriers between its batches and the bulk
# groups' read waits) and its z loads, not in the main loop.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b124
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b124/main
BOUND=${BOUND:-300}
MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout $(to 250 30) ncu --clock-control none \
  -k regex:"fp8w_dswiglu_gather" --launch-skip 1 --launch-count 1 --set full --import-source no -o $OUT/r/prof \
  $B/layer_bench --bench > $OUT/r/ncu_run.txt 2>&1
echo "== ncu rc $? at $(el) s"; tail -3 $OUT/r/ncu_run.txt | cut -c1-200
ncu --import $OUT/r/prof.ncu-rep --page details > $OUT/r/ncu_details.txt 2>&1
ncu --import $OUT/r/prof.ncu-rep --page source --print-source sass --csv > $OUT/r/ncu_sass.csv 2>&1
python3 ../benches/sass_stalls.py $OUT/r/ncu_sass.csv 25 > $OUT/r/stalls.txt 2>&1; head -60 $OUT/r/stalls.txt | cut -c1-200
gzip $OUT/r/ncu_sass.csv $OUT/r/prof.ncu-rep 2>/dev/null
grep -E "Duration|Tensor|Issue Slots Busy|Eligible Warps|DRAM Throughput|L2 Cache Throughput|Memory Throughput|Shared Memory|SM Busy|Registers" $OUT/r/ncu_details.txt | head -30
echo "total $(el) s"

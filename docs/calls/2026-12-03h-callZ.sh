#!/usr/bin/env bash
# 2026-12-03 (thirteenth session), call Z: the FP8 weight gradients without the serialisation call Y's SASS showed
# (ptxas C7514: every QGMMA followed by WARPGROUP.DEPBAR 0: a partial in flight across the loop's second exit);
# the main loop now runs whole pairs of blocks with the tail outside (16 QGMMA, 6 DEPBAR). Tests, then the bench at
# 30B and 235B, then a short ncu (SpeedOfLight) of the 30B dW2 launches. Predicted: dW2 609 -> ~450 us, dW1 1326 ->
# ~900 us (1.3-1.4x the bf16 kernel); ncu compute throughput 40% -> 55% or more.
set -uo pipefail
cd "$(dirname "$0")/bZ"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 100 ./fp8 --include-ignored --test-threads=1 --nocapture > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked|FP8 wgrad" $OUT/fp8.txt | head -8
for shape in 30B 235B; do
  [ $(( $(date +%s) - start )) -gt 250 ] && break
  t0=$(date +%s); MEGAMOE_BENCH_FP8_WGRAD=1 MEGAMOE_BENCH_ONLY=$shape timeout 150 ./fp8_bench --bench > $OUT/fp8_bench_$shape.txt 2>&1; echo "== fp8 bench $shape rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "RESULT.*(K-grouped|layer)|FAIL" $OUT/fp8_bench_$shape.txt | cut -c1-330
done
if [ $(( $(date +%s) - start )) -lt 330 ]; then
  MEGAMOE_BENCH_FP8_WGRAD=1 MEGAMOE_BENCH_ONLY=30B timeout 150 ncu --clock-control none -k regex:"^grouped_wgrad(_fp8)?_bf16$" --launch-skip 6 --launch-count 2 \
    --section SpeedOfLight -o $OUT/prof ./fp8_bench --bench > $OUT/ncu_run.txt 2>&1; echo "== ncu rc $? at $(( $(date +%s) - start )) s"
  ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
  grep -E "grouped_wgrad|Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput" $OUT/ncu_details.txt | head -16
fi
echo "total $(( $(date +%s) - start )) s"

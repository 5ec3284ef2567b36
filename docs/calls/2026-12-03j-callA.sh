#!/usr/bin/env bash
# 2026-12-03 (fifteenth session), call A: the wip FP8 series (ht-recompute, quant-lines, quant-rows-units) on top of
# b1702d0: tests first (fp8, graph incl. the new FP8 graph tests and the refusal test), then the layer bench of
# wip and main alternately per shape (same call), then ncu per-kernel at 30B of wip if time remains.
set -uo pipefail
cd "$(dirname "$0")/bA"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 120 wip/fp8 --include-ignored --test-threads=1 > $OUT/wip_fp8.txt 2>&1; echo "== wip fp8 rc $? at $(el) s: $(grep 'test result' $OUT/wip_fp8.txt)"
grep -E "FAILED|panicked|backward_fp8 \((Dx|Wgrad|DxWgrad)\) T" $OUT/wip_fp8.txt | cut -c1-300 | head -12
timeout 90 wip/graph --include-ignored --test-threads=1 > $OUT/wip_graph.txt 2>&1; echo "== wip graph rc $? at $(el) s: $(grep 'test result' $OUT/wip_graph.txt)"
grep -E "FAILED|panicked" $OUT/wip_graph.txt | cut -c1-300 | head -6
if grep -q FAILED $OUT/wip_fp8.txt $OUT/wip_graph.txt; then
  timeout 90 main/graph --include-ignored --test-threads=1 > $OUT/main_graph.txt 2>&1; echo "== main graph rc $? at $(el) s: $(grep 'test result' $OUT/main_graph.txt)"
fi
for shape in 30B 235B; do
  for v in wip main; do
    [ $(el) -gt 430 ] && break 2
    MEGAMOE_BENCH_ONLY=$shape timeout 150 $v/layer --bench > $OUT/${v}_layer_$shape.txt 2>&1; echo "== $v layer $shape rc $? at $(el) s"
    grep -E "RESULT.*FP8" $OUT/${v}_layer_$shape.txt | cut -c1-330
  done
done
if [ $(el) -lt 470 ]; then
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout $(( 560 - $(el) )) ncu --clock-control none --metrics gpu__time_duration.sum \
    --csv wip/layer --bench > $OUT/ncu_30B.csv 2> $OUT/ncu_30B.err; echo "== ncu 30B rc $? at $(el) s"
fi
echo "total $(el) s"

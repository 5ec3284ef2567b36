#!/usr/bin/env bash
# (ran with docs/wip/gather-rows-warp.patch applied to aa786ff; the patch is not on main: the warp gather was no faster)
# Session 2026-12-03 (ninth), call H: the row gather by warps (gather_rows_w: grid-stride, a warp per row, 8
# chunks in flight a lane) against gather_rows (a block per row, 131072 blocks at 30B), MEGAMOE_GATHER_ROWS=warp.
# 1. layer_backward with MEGAMOE_GATHER=pass MEGAMOE_GATHER_ROWS=warp (x's and dy's gathers by the new kernel),
# 2. layer bench 30B with MEGAMOE_BENCH_PHASES=1, block / warp alternating, two rounds, 3. gemm bench 30B with
# MEGAMOE_BENCH_AB=0 (dW f32 and bf16 each back to back). Predicted: the dy gather 239 -> 160-180 us if block
# scheduling limits it, unchanged if HBM writes do; 30B dW2 bf16 back to back nearer ncu's 614 us than 738.
set -uo pipefail
cd "$(dirname "$0")/bH"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
t0=$(date +%s); MEGAMOE_GATHER=pass MEGAMOE_GATHER_ROWS=warp timeout 80 ./layer_backward --include-ignored --test-threads=1 --skip qwen3 > $OUT/layer_backward.txt 2>&1; rc=$?
echo "== layer_backward (pass, warp gather) rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_backward.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/layer_backward.txt | head -5
for round in 1 2; do
  for k in block warp; do
    late 125 && break
    t0=$(date +%s); MEGAMOE_GATHER_ROWS=$k MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer_${k}_$round.txt 2>&1; rc=$?
    echo "== $k round $round rc $rc in $(( $(date +%s) - t0 )) s"
    grep -E 'PHASE .*gather_rows|PHASES' $OUT/layer_${k}_$round.txt | cut -c1-160
    grep RESULT $OUT/layer_${k}_$round.txt | grep -E 'forward Qwen|z saved' | sed 's/(3x the forward.*//' | cut -c1-230
  done
done
late 150 || { t0=$(date +%s); MEGAMOE_BENCH_AB=0 MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > $OUT/gemm_ab0.txt 2>&1; echo "== gemm 30B AB=0 rc $? in $(( $(date +%s) - t0 )) s"; grep RESULT $OUT/gemm_ab0.txt | grep dW | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/RESULT gemm Qwen3-//' | cut -c1-170; }
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# 2026-12-03 (eleventh session), call A: one build of main + graph + ep-epoch + tma-rows + tma-gather (worktree
# wt-all). Test suites, four processes at once (separate contexts; the CPU reference dominates), then the TMA rows
# self-test.
set -uo pipefail
cd "$(dirname "$0")/bA"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
run() { local name=$1; shift; local t0=$(date +%s); env "$@" --include-ignored --test-threads=1 > $OUT/$name.txt 2>&1; local rc=$?
  echo "== $name rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$name.txt | tail -1)"; grep -E "FAILED|panicked|refused as" $OUT/$name.txt | head -8; }
timeout 60 ./gpu_primitives tma_row --include-ignored --nocapture > $OUT/tma_rows.txt 2>&1
echo "== tma rows rc $?"; grep -E "cycles|test result|panicked|self-test|layout" $OUT/tma_rows.txt | head -8
( for t in graph ep grouped_gemm gpu_primitives; do run $t timeout 150 ./$t; done ) &
run layer_backward timeout 330 ./layer_backward &
run layer_backward_dy MEGAMOE_DY_GATHER=tma timeout 330 ./layer_backward &
run layer_forward timeout 330 ./layer_forward &
wait
grep -E "rel err" $OUT/graph.txt | head -12
echo "total $(( $(date +%s) - start )) s"

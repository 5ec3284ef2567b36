#!/usr/bin/env bash
# Prepared 2026-12-03 (tenth session), not run. Setup here: on a branch from main, `git am docs/wip/tma-rows.patch
# docs/wip/tma-gather.patch` (both apply on top of graph.patch too), `cargo xtask gpu-bundle .dev/bundle`; copy
# gpu_primitives, grouped_gemm, layer_backward, gemm, layer into .dev/bT, this script to .dev/callT.sh; carry
# [".dev/bT", ".dev/callT.sh"]. ~250 s.
# 1. Can TMA gather rows (selftest_tma_rows: one-row boxes keep the 128-byte swizzle? cycles against one box)?
# 2. If so, the dh + SwiGLU backward with dy's rows gathered by TMA from the tokens: bitwise the gathered-copy
#    kernel (grouped_gemm dswiglu_dy_gathered_by_tma_matches; layer_backward with MEGAMOE_DH_GATHER=tma, whose
#    reference checks and repeat-bitwise checks then cover it), and its time alternating with the gathered-copy
#    kernel (gemm bench, 30B, last dh line). Predicted: within +-5% of the copy's kernel (the same L2 bytes; the
#    DRAM side reads 128-byte segments of the 67 MB token-major dy instead of the 537 MB copy); if it is, the
#    next step drops the dy gather pass (238 us) by gathering dW2's operand the same way or by dh writing the copy.
# 3. MEGAMOE_DY_GATHER=tma (second commit of the patch): no dy copy at all, dh and dW2 gather from the tokens;
#    layer_backward under it, then the 30B layer with and without it, alternating processes.
set -uo pipefail
cd "$(dirname "$0")/bT"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
timeout 60 ./gpu_primitives tma_row --include-ignored --nocapture > $OUT/tma_rows.txt 2>&1; rc=$?
echo "== tma rows rc $rc"; grep -E "cycles|test result|panicked|self-test" $OUT/tma_rows.txt | head -5
[ $rc -eq 0 ] || { echo "one-row boxes do not give the layout: stop here"; exit 0; }
timeout 120 ./grouped_gemm dswiglu --include-ignored --test-threads=1 > $OUT/grouped_gemm.txt 2>&1
echo "== grouped_gemm dswiglu rc $?: $(grep 'test result' $OUT/grouped_gemm.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/grouped_gemm.txt | head -5
t0=$(date +%s); MEGAMOE_DH_GATHER=tma timeout 200 ./layer_backward --include-ignored --test-threads=1 --skip qwen3 > $OUT/layer_backward_tma.txt 2>&1
echo "== layer_backward (MEGAMOE_DH_GATHER=tma, Qwen-sized skipped) rc $? in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_backward_tma.txt | tail -1)"
grep -E "FAILED|panicked" $OUT/layer_backward_tma.txt | head -5
t0=$(date +%s); MEGAMOE_DY_GATHER=tma timeout 200 ./layer_backward --include-ignored --test-threads=1 --skip qwen3 > $OUT/layer_backward_dy.txt 2>&1
echo "== layer_backward (MEGAMOE_DY_GATHER=tma: no dy copy, dh and dW2 gather) rc $? in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_backward_dy.txt | tail -1)"
grep -E "FAILED|panicked" $OUT/layer_backward_dy.txt | head -5
late 300 || { MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > $OUT/gemm.txt 2>&1; echo "== gemm rc $?"
  grep -E "dh \+ SwiGLU" $OUT/gemm.txt | sed 's/(sample rel err[^)]*)//' | cut -c1-230; }
# the whole layer with and without the dy copy, two processes alternating (predicted: fwd + bwd -150..-250 us)
for mode in pass tma pass tma; do
  late 480 && break
  MEGAMOE_DY_GATHER=$mode MEGAMOE_BENCH_ONLY=30B timeout 80 ./layer --bench > $OUT/layer_$mode.txt 2>&1; echo "== layer dy $mode rc $?"
  grep RESULT $OUT/layer_$mode.txt | grep -E "z saved, bf16|forward\+backward \(z saved\)" | cut -c1-160
done
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# Prepared 2026-12-03 (tenth session), not run (the device refused three starts after call G; budget spent).
# Setup here: `git checkout -b graph && git am docs/wip/graph.patch` (then, for the EP part, `git am
# docs/wip/ep-epoch.patch` on top, or build it in a second worktree), `cargo xtask gpu-bundle .dev/bundle`; copy
# graph, ep, grouped_gemm, gpu_primitives, layer_backward, layer (and from the ep-epoch build its graph and ep as
# graph_epoch, ep_epoch) into .dev/bG, this script to .dev/callG.sh; carry [".dev/bG", ".dev/callG.sh"].
# 1. tests/graph.rs on the graph patch: the layer's step captured (global capture mode) and replayed on new inputs,
#    bitwise the eager step, within 1e-2 of the reference; the refused capture; forward_into's checks. The first
#    run (call G) failed at begin_capture: the Gpu used the legacy default stream; the patch now gives each Gpu a
#    stream of its own, so every GPU test must pass again on it (ep, grouped_gemm, primitives, layer_backward).
# 4. If built: docs/wip/tma-rows.patch (`git am` in a third worktree on main; its gpu_primitives copied as
#    gpu_primitives_rows): `./gpu_primitives_rows tma_row --include-ignored --nocapture` (seconds). Do one-row TMA
#    boxes land in the 128-byte-swizzled layout (predicted yes: the swizzle is a function of the shared-memory
#    address), and how many cycles do 128 of them take against one 128-row box (predicted 1.5-3x)?
# 3. (last) The layer bench at 30B: its new last line times the z-saved step as one CUDA graph against the same
#    step launched eagerly, alternating (predicted: within ~1%, the eager launch gaps were 27 us a step).
# 2. The ep-epoch patch's graph tests (EP forward / backward captured, R = 4 emulated) and tests/ep.rs (every EP
#    kernel now reads its epoch from the workspace).
set -uo pipefail
cd "$(dirname "$0")/bG"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
for t in graph ep grouped_gemm gpu_primitives graph_epoch ep_epoch layer_backward; do
  late 400 && { echo "== $t skipped for time"; continue; }
  t0=$(date +%s); timeout 200 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; rc=$?
  echo "== $t rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$t.txt | tail -1)"; grep -E "FAILED|panicked|refused as|Err" $OUT/$t.txt | head -8
done
grep -E "rel err" $OUT/graph.txt | grep graph | head -12
[ -x ./gpu_primitives_rows ] && { timeout 60 ./gpu_primitives_rows tma_row --include-ignored --nocapture > $OUT/tma_rows.txt 2>&1; echo "== tma rows rc $?"; grep -E "cycles|test result|panicked|self-test" $OUT/tma_rows.txt | head -5; }
late 480 || { MEGAMOE_BENCH_ONLY=30B timeout 90 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $?"; grep RESULT $OUT/layer.txt | grep -E "CUDA graph|z saved, bf16" | cut -c1-260; }
echo "total $(( $(date +%s) - start )) s"

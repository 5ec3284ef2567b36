#!/usr/bin/env bash
# Ran 2026-12-03 (tenth session) as call P on the patches then landed as ec6f508: all green.
# Prepared 2026-12-03 (ninth session), not run: `git apply docs/wip/ep-pull-dispatch.patch` then
# `git apply docs/wip/ep-scatter-combine.patch` (CPU tests and ptxas clean applied to main afb8a86+),
# `cargo xtask gpu-bundle .dev/bundle`, copy ep, ep_bench into .dev/bP, this script to .dev/callP.sh; carry
# [".dev/bP", ".dev/callP.sh"]. The tests pull_*, scatter_*, pull_scatter_* set their modes themselves.
# 1. tests/ep.rs all (the push as before, the new pull_* tests bitwise against EP = 1, the withheld-rank
#    timeout with the push), then the pull tests again under MEGAMOE_EP_PULL=1 for the whole file (the withheld
#    test then exercises the pull's bounded waits).
# 2. ep_bench (emulated EP, 30B shape) with MEGAMOE_EP_PULL / MEGAMOE_EP_SCATTER 0 / 1. Predicted: pull, the
#    forward's dispatch stage leaves the critical path (its 8-byte meta push stays), GEMM1 slower by the copy it
#    now carries (the single-GPU overlapped gather saved 70-100 of 239 us); scatter, the combine stage shrinks to
#    the sources' sums and GEMM2 slows by its register stores (the scatter epilogue has not been timed against
#    GEMM2's TMA-store epilogue yet).
set -uo pipefail
cd "$(dirname "$0")/bP"
t0=$(date +%s); timeout 200 ./ep --include-ignored --test-threads=1 > $OUT/ep.txt 2>&1; rc=$?
echo "== ep rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/ep.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/ep.txt | head -5
t0=$(date +%s); MEGAMOE_EP_PULL=1 timeout 200 ./ep --include-ignored --test-threads=1 > $OUT/ep_pull_env.txt 2>&1; rc=$?
echo "== ep (MEGAMOE_EP_PULL=1) rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/ep_pull_env.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/ep_pull_env.txt | head -5
t0=$(date +%s); MEGAMOE_EP_PULL=1 MEGAMOE_EP_SCATTER=1 timeout 200 ./ep --include-ignored --test-threads=1 > $OUT/ep_both_env.txt 2>&1; rc=$?
echo "== ep (pull + scatter for every test) rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/ep_both_env.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/ep_both_env.txt | head -5
for mode in "0 0" "1 0" "0 1" "1 1" "0 0" "1 1"; do
  set -- $mode
  MEGAMOE_EP_PULL=$1 MEGAMOE_EP_SCATTER=$2 timeout 90 ./ep_bench --bench > /tmp/b.txt 2>&1; echo "== ep_bench pull $1 scatter $2 rc $?"
  cat /tmp/b.txt >> $OUT/ep_bench_$1$2.txt; grep RESULT /tmp/b.txt | cut -c1-200
done

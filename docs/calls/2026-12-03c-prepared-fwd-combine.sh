#!/usr/bin/env bash
# RAN in the ninth session (2026-12-03, call D, docs/calls/2026-12-03d-callD.sh): rejected, see docs/RESULTS.md; kept for the record.
# Prepared 2026-12-03 (eighth session), not run: `git apply docs/wip/fwd-combine.patch` (GEMM2's idle producer
# warps run the forward's combine as m-tiles complete: grouped_gemm_bf16_cmb, used by Gather::Overlapped with
# Forward::Launches), `cargo xtask gpu-bundle .dev/bundle`, copy layer_forward, layer_backward, layer into .dev/bF,
# this script to .dev/callF.sh; carry [".dev/bF", ".dev/callF.sh"].
# Tests: layer_forward (the overlapped variants compare y bitwise with the passes, masked tokens included) and
# layer_backward; then the 30B layer (phase 2: "two launches, gather and combine passes" against the default).
# Predicted: the forward 50-90 us faster (most tokens' last rows sit in the last experts' m-tiles, so much of the
# 152 us combine runs at GEMM2's end); the forward + backward by as much.
set -uo pipefail
cd "$(dirname "$0")/bF"
for t in layer_forward layer_backward; do
  timeout 200 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1
  echo "== $t rc $?: $(grep 'test result' $OUT/$t.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/$t.txt | head -5
done
for i in 1 2; do
  MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer_$i.txt 2>&1; echo "== layer run $i rc $?"
  grep RESULT $OUT/layer_$i.txt | cut -c1-240
done

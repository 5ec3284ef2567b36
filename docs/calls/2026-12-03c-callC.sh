#!/usr/bin/env bash
# Session 2026-12-03 (eighth), call C: Gather::Overlapped the default; the persistent forward defers a GEMM1 tile's
# count only when the walk's head (min(lag, m-tiles)) >= fused_lag_min (call B's unconditional deferral deadlocked
# at 30B, T = 256, every slot on one expert: 16 m-tiles < lag 24). Carry [".dev/bC", ".dev/callC.sh"].
# 1. megamoe's 30B layer (phase 1: the default, now overlapped, timed as the PyTorch partner times) and
#    torch._grouped_mm's 30B layer, same call (issue 4: forward >= 2.5x, forward + backward >= 2x).
# 2. layer_backward with MEGAMOE_FORWARD=persistent (every backward test on the persistent forward and the
#    overlapped default, the deadlocked test included), 3. layer_forward's tests of the default (the persistent
#    and overlapped variant tests passed in call B).
set -uo pipefail
cd "$(dirname "$0")/bC"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
echo "== megamoe layer 30B"; MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/megamoe_layer.txt 2>&1; echo "rc $?"
grep RESULT $OUT/megamoe_layer.txt | cut -c1-240
echo "== torch 30B ($(( $(date +%s) - start )) s)"; MEGAMOE_BENCH_ONLY=30B MEGAMOE_TORCH_LOOP=0 PYTHONUNBUFFERED=1 timeout 90 python3 torch_layer.py > $OUT/torch_layer.txt 2>&1; echo "rc $?"
grep RESULT $OUT/torch_layer.txt | cut -c1-130
t0=$(date +%s)
MEGAMOE_FORWARD=persistent timeout 150 ./layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward_persistent.txt 2>&1; rc=$?
echo "== layer_backward, MEGAMOE_FORWARD=persistent: rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_backward_persistent.txt | tail -1)"
grep -E "FAILED|panicked" $OUT/layer_backward_persistent.txt | head -6
late 200 && { echo "total $(( $(date +%s) - start )) s (layer_forward left out)"; exit 0; }
t0=$(date +%s)
timeout 100 ./layer_forward --include-ignored --test-threads=1 --skip persistent --skip overlapped > $OUT/layer_forward.txt 2>&1; rc=$?
echo "== layer_forward: rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_forward.txt | tail -1)"
grep -E "FAILED|panicked" $OUT/layer_forward.txt | head -6
echo "total $(( $(date +%s) - start )) s"

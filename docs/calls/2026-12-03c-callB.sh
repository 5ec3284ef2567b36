#!/usr/bin/env bash
# Session 2026-12-03 (eighth), call B: branch wgrad-epi after call A (wgrad epilogues reverted; the persistent
# forward counts a GEMM1 tile after its block's next main loop; the movers keep 8 loads in flight with a 72 / 216
# register split; dy gathered by the pass again; the dx combine run by dW2's and dW1's idle producer warps, a third and
# two thirds of the tokens). Carry [".dev/bB", ".dev/callB.sh"].
# Tests (layer_forward persistent + overlapped, grouped_gemm all), the layer bench on both shapes (phase 1 as the
# PyTorch partner times; phase 2 the variants alternating with the default), torch._grouped_mm's layer on both
# shapes in the same call, the 30B layer again, then (time allowing) every layer_backward test with both variants
# as the defaults (MEGAMOE_GATHER=overlapped MEGAMOE_FORWARD=persistent).
# Predicted: persistent forward from 0.98x to ~1.01x of two launches (no copy-engine wait per GEMM1 tile);
# overlapped gather forward from ~1.03x to ~1.06x (the movers keep up with 8 loads in flight), fwd+bwd z saved
# ~1.01x (forward only).
set -uo pipefail
cd "$(dirname "$0")/bB"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p $OUT/t
for spec in "layer_forward:persistent overlapped:200" "grouped_gemm::70"; do
  IFS=: read -r t f to <<< "$spec"
  t0=$(date +%s)
  timeout $to ./$t --include-ignored --test-threads=1 $f > $OUT/t/$t.txt 2>&1; rc=$?
  echo "== $t $f rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/t/$t.txt | tail -1)"
  grep -E "FAILED|panicked" $OUT/t/$t.txt | head -8
done
(cd $OUT && tar czf tests.tgz t && rm -r t)
echo "== megamoe layer ($(( $(date +%s) - start )) s)"; timeout 170 ./layer --bench > $OUT/megamoe_layer.txt 2>&1; echo "rc $?"
grep RESULT $OUT/megamoe_layer.txt | cut -c1-240
echo "== torch ($(( $(date +%s) - start )) s)"; MEGAMOE_TORCH_LOOP=0 PYTHONUNBUFFERED=1 timeout 150 python3 torch_layer.py > $OUT/torch_layer.txt 2>&1; echo "rc $?"
grep RESULT $OUT/torch_layer.txt | cut -c1-130
if ! late 330; then
  t0=$(date +%s)
  MEGAMOE_GATHER=overlapped MEGAMOE_FORWARD=persistent timeout 150 ./layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward_ov.txt 2>&1; rc=$?
  echo "== layer_backward, MEGAMOE_GATHER=overlapped MEGAMOE_FORWARD=persistent: rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_backward_ov.txt | tail -1)"
  grep -E "FAILED|panicked" $OUT/layer_backward_ov.txt | head -8
fi
if ! late 440; then
  echo "== megamoe layer 30B again ($(( $(date +%s) - start )) s)"; MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/megamoe_layer_30b_again.txt 2>&1; echo "rc $?"
  grep RESULT $OUT/megamoe_layer_30b_again.txt | cut -c1-240
fi
echo "total $(( $(date +%s) - start )) s"

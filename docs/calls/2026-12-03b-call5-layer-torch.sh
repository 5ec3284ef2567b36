#!/usr/bin/env bash
# Session 13 call 5 (main): the layer benchmark (both shapes) and the PyTorch torch._grouped_mm layer (both
# shapes, the per-expert loop left out), same GPU, same call; then megamoe's 30B layer again (bracketing).
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
echo "== megamoe layer"; timeout 120 ./layer --bench > $OUT/megamoe_layer.txt 2>&1; echo "rc $? at $(( $(date +%s) - start )) s"
grep RESULT $OUT/megamoe_layer.txt | cut -c1-130
echo "== torch"; MEGAMOE_TORCH_LOOP=0 PYTHONUNBUFFERED=1 timeout 120 python3 torch_layer.py > $OUT/torch_layer.txt 2>&1; echo "rc $? at $(( $(date +%s) - start )) s"
grep RESULT $OUT/torch_layer.txt | cut -c1-130
if [ $(( $(date +%s) - start )) -lt 200 ]; then
  echo "== megamoe layer 30B again"; MEGAMOE_BENCH_ONLY=30B timeout 40 ./layer --bench > $OUT/megamoe_layer_30b_again.txt 2>&1; echo "rc $?"
  grep RESULT $OUT/megamoe_layer_30b_again.txt | cut -c1-130
fi
echo "total $(( $(date +%s) - start )) s"

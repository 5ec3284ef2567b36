#!/usr/bin/env bash
# One call on the GPU machine: megamoe's layer benchmark and the PyTorch baselines, same GPU, same session, then
# both layers in one process timed in rotation (benches/torch_rotation.py), then the step traces (benches/trace_step.py).
# Usage (from a gpu-bundle folder that holds `layer` and this repo's benches/torch_layer.py):
#   bash h200.sh [OUT_DIR]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-.}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
"$here/layer" --bench 2>&1 | tee "$out/megamoe_bench.txt"
PYTHONUNBUFFERED=1 python3 "$here/torch_layer.py" 2>&1 | tee "$out/torch_bench.txt"
# both layers in one process, timed in rotation (through the bindings: the bundle's libmegamoe_capi.so)
for s in 30B 235B; do
  MEGAMOE_LIB="$here/libmegamoe_capi.so" PYTHONUNBUFFERED=1 python3 "$here/torch_rotation.py" $s 2>&1 \
    | tee -a "$out/rotation_bench.txt"
done
# where each side's step goes, kernel by kernel on the GPU's clock (ours with z saved, bf16 and FP8)
for s in 30B 235B; do
  for m in z fp8; do
    MEGAMOE_LIB="$here/libmegamoe_capi.so" PYTHONUNBUFFERED=1 python3 "$here/trace_step.py" $s $m 2>&1 \
      | tee -a "$out/trace_step.txt"
  done
done
echo "== summary"
grep -h RESULT "$out/megamoe_bench.txt" "$out/torch_bench.txt" "$out/rotation_bench.txt"
grep -h "RESULT trace-step .*: span" "$out/trace_step.txt"

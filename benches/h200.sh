#!/usr/bin/env bash
# One call on the GPU machine: megamoe's layer benchmark and the PyTorch baselines, same GPU, same session.
# Usage (from a gpu-bundle folder that holds `layer` and this repo's benches/torch_layer.py):
#   bash h200.sh [OUT_DIR]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-.}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
"$here/layer" --bench 2>&1 | tee "$out/megamoe_bench.txt"
PYTHONUNBUFFERED=1 python3 "$here/torch_layer.py" 2>&1 | tee "$out/torch_bench.txt"
echo "== summary"
grep -h RESULT "$out/megamoe_bench.txt" "$out/torch_bench.txt"

#!/usr/bin/env bash
# 2026-12-03 (fourteenth session), call B2: the FP8 weight gradients in the layer (Fp8Backward::Wgrad): the gather
# fused into the column quantizer (dy: codes + the bf16 gathered rows in one pass; x: 128 x 128 blocks, no bf16
# gather), dz and s h quantized by passes, grouped_wgrad_fp8b for dW2 and dW1, dx's combine by a pass. Tests: fp8
# in full (the new gather tests bitwise, backward_fp8_wgrad against the FP8 model), layer_backward (the reference's
# chunking changed); the 30B layer bench. Predicted: tests pass; FP8 step with FP8 wgrad ~ -100..-250 us against
# the straight FP8 step (wgrad -480, dz/s h passes +260, combine pass +150, x gather -100, dy codes +70).
set -uo pipefail
cd "$(dirname "$0")/bB2"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 200 ./fp8 --include-ignored --test-threads=1 --nocapture > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked|FP8 weight gradients\) T" $OUT/fp8.txt | cut -c1-400 | head -12
timeout 150 ./layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward.txt 2>&1; echo "== layer_backward rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/layer_backward.txt)"
grep -E "FAILED|panicked" $OUT/layer_backward.txt | head -5
MEGAMOE_BENCH_ONLY=30B timeout 200 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*(FP8|forward\+backward \(|Error)" $OUT/layer.txt | cut -c1-420 | head -12
tail -3 $OUT/layer.txt
echo "total $(( $(date +%s) - start )) s"

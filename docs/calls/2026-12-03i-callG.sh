#!/usr/bin/env bash
# 2026-12-03 (fourteenth session), call G: the FP8 weight gradients at the 235B shape (same binary as call E). Call F
# (ncu, 30B): the FP8 wgrad kernels save 467 us, the quantization passes cost 593 us more than the bf16 gathers. The
# kernels' FLOPs grow with H I and the quantized bytes with H + I: at 235B (H 4096, I 1536) the saving should be ~4x
# and the quantization ~2x. Predicted: the FP8-wgrad step ~0.9 ms faster than the straight FP8 step (~1.04-1.05x).
set -uo pipefail
cd "$(dirname "$0")/bG"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
MEGAMOE_BENCH_ONLY=235B timeout 400 ./layer --bench > $OUT/layer_235b.txt 2>&1; echo "== layer 235B rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT" $OUT/layer_235b.txt | cut -c1-420 | head -14
echo "total $(( $(date +%s) - start )) s"

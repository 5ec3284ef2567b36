#!/usr/bin/env bash
# Session 2026-12-03 (ninth), call E: bf16 weight-gradient output (grouped_wgrad_bf16, Grads<bf16>).
# 1. grouped_gemm wgrad tests (f32 and bf16, bitwise against the f32 kernel rounded), 2. layer_backward (all,
# with the bf16-gradient tests), 3. gemm bench 30B (dW f32 and bf16 alternating), 4. layer bench 30B and
# torch._grouped_mm's 30B layer in the same call, 5. gemm bench 235B if time remains.
# Predicted: 30B dW1 1344 -> ~1150 us, dW2 714 -> ~610 us with bf16 out; fwd+bwd (z saved) ~-290 us.
set -uo pipefail
cd "$(dirname "$0")/bE"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
t0=$(date +%s); timeout 90 ./grouped_gemm --include-ignored --test-threads=1 wgrad > $OUT/grouped_gemm.txt 2>&1; rc=$?
echo "== grouped_gemm wgrad rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/grouped_gemm.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/grouped_gemm.txt | head -5
t0=$(date +%s); timeout 200 ./layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward.txt 2>&1; rc=$?
echo "== layer_backward rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_backward.txt | tail -1)"; grep -E "FAILED|panicked|bf16\): rel" $OUT/layer_backward.txt | head -12
t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > $OUT/gemm_30b.txt 2>&1; echo "== gemm 30B rc $? in $(( $(date +%s) - t0 )) s"
grep RESULT $OUT/gemm_30b.txt | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/RESULT gemm Qwen3-//' | cut -c1-190
t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer 30B rc $? in $(( $(date +%s) - t0 )) s"
grep RESULT $OUT/layer.txt | cut -c1-300
late 450 || { t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B MEGAMOE_TORCH_LOOP=0 PYTHONUNBUFFERED=1 timeout 90 python3 torch_layer.py > $OUT/torch_layer.txt 2>&1; echo "== torch 30B rc $? in $(( $(date +%s) - t0 )) s"; grep RESULT $OUT/torch_layer.txt | cut -c1-150; }
late 500 || { t0=$(date +%s); MEGAMOE_BENCH_ONLY=235B timeout 80 ./gemm --bench > $OUT/gemm_235b.txt 2>&1; echo "== gemm 235B rc $? in $(( $(date +%s) - t0 )) s"; grep RESULT $OUT/gemm_235b.txt | grep dW | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/RESULT gemm Qwen3-//' | cut -c1-190; }
echo "total $(( $(date +%s) - start )) s"

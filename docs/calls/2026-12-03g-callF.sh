#!/usr/bin/env bash
# 2026-12-03 (twelfth session), call F: MoeLayer::backward_fp8 (the backward of the FP8 forward: z recomputed in
# FP8 from the tokens' codes, then the bf16 backward; straight-through). Tests: fp8 (backward_fp8 against the f64
# model with z from the dequantized operands; both save modes bitwise; refusals), layer_backward and graph (the
# bf16 backward went through the refactor) in parallel; then the layer bench (new last line: FP8 fwd + bwd
# against the bf16 fwd + bwd, z recomputed, alternating). Predicted: ~1.04x at 30B (forward -300 us, z's recompute
# -60 us of ~9.3 ms).
set -uo pipefail
cd "$(dirname "$0")/bF"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
run() { local name=$1; shift; local t0=$(date +%s); "$@" --include-ignored --test-threads=1 > $OUT/$name.txt 2>&1; local rc=$?
  echo "== $name rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$name.txt | tail -1)"; grep -E "FAILED|panicked|rel err|backward_fp8" $OUT/$name.txt | head -12; }
run fp8 timeout 150 ./fp8 --nocapture &
run layer_backward timeout 230 ./layer_backward &
run graph timeout 200 ./graph &
wait
for shape in 30B 235B; do
  late 420 && break
  t0=$(date +%s); MEGAMOE_BENCH_ONLY=$shape timeout 150 ./layer --bench > $OUT/layer_$shape.txt 2>&1; echo "== layer $shape rc $? in $(( $(date +%s) - t0 )) s"
  grep RESULT $OUT/layer_$shape.txt | grep -E "FP8|forward Qwen|z recomputed|z saved\) Qwen" | cut -c1-300
done
echo "total $(( $(date +%s) - start )) s"

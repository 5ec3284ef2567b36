#!/usr/bin/env bash
# 2026-12-03 (thirteenth session), call X: the FP8 weight gradients with two partials a warpgroup (block k promoted
# while block k + 1 runs), 8-byte scale loads and the bf16 weight gradients' staged TMA epilogue (5 stages); the
# bf16 weight gradients' ring barriers moved out of consumer warp 6's staging (they overlapped since b51d2d3).
# Tests: fp8, grouped_gemm, layer_backward (in parallel); then the 30B and 235B FP8 bench with the wgrad lines.
# Predicted: FP8 dW1 1269 -> ~900 us, dW2 694 -> ~480 us (1.3-1.4x the bf16 kernel); bf16 wgrad unchanged (+-1%).
set -uo pipefail
cd "$(dirname "$0")/bX"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
run() { local name=$1; shift; local t0=$(date +%s); "$@" --include-ignored --test-threads=1 --nocapture > $OUT/$name.txt 2>&1; local rc=$?
  echo "== $name rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$name.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/$name.txt | head -8; }
run fp8 timeout 150 ./fp8 &
run grouped_gemm timeout 150 ./grouped_gemm &
run layer_backward timeout 230 ./layer_backward &
wait
grep -E "FP8 wgrad" $OUT/fp8.txt | head -6
for shape in 30B 235B; do
  [ $(( $(date +%s) - start )) -gt 380 ] && break
  t0=$(date +%s); MEGAMOE_BENCH_FP8_WGRAD=1 MEGAMOE_BENCH_ONLY=$shape timeout 150 ./fp8_bench --bench > $OUT/fp8_bench_$shape.txt 2>&1; echo "== fp8 bench $shape rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "RESULT.*(K-grouped|layer)|FAIL" $OUT/fp8_bench_$shape.txt | cut -c1-330
done
echo "total $(( $(date +%s) - start )) s"

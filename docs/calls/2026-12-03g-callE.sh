#!/usr/bin/env bash
# 2026-12-03 (twelfth session), call E: the weight gradients' held-stage epilogue (each tile's last ring stage kept
# as three more staging boxes a warp until the next tile's first k-step). Tests: grouped_gemm (every wgrad test
# now also bitwise against MEGAMOE_WGRAD_HOLD=0; new: many tiles per block), layer_backward, ep in parallel;
# then the 30B gemm bench (its new line: held stage against without, alternating, f32 and bf16) and the 30B layer
# bench (its new line: the z-saved fwd+bwd with and without, alternating). Predicted: dW1 / dW2 +3-8% (f32),
# +2-5% (bf16), or nothing if the output bytes bound them (as three store paths suggested in the eighth session).
set -uo pipefail
cd "$(dirname "$0")/bE"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
run() { local name=$1; shift; local t0=$(date +%s); "$@" --include-ignored --test-threads=1 > $OUT/$name.txt 2>&1; local rc=$?
  echo "== $name rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$name.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/$name.txt | head -8; }
run grouped_gemm timeout 150 ./grouped_gemm &
run layer_backward timeout 230 ./layer_backward &
run ep timeout 200 ./ep &
wait
t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 100 ./gemm --bench > $OUT/gemm.txt 2>&1; echo "== gemm rc $? in $(( $(date +%s) - t0 )) s"
grep RESULT $OUT/gemm.txt | grep -E "dW|GEMM1 |GEMM2|dh|dx" | sed 's/(sample rel err[^)]*)//' | cut -c1-250
t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 120 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $? in $(( $(date +%s) - t0 )) s"
grep RESULT $OUT/layer.txt | grep -E "A/B|z saved|forward Qwen" | cut -c1-260
echo "total $(( $(date +%s) - start )) s"

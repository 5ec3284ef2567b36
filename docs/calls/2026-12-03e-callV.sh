#!/usr/bin/env bash
# Ran 2026-12-03 (tenth session) as call V: all green; results docs/RESULTS.md "2026-12-03 (tenth session)".
# Prepared 2026-12-03 (ninth session), not run. Bundle main (`cargo xtask gpu-bundle .dev/bundle`), copy
# grouped_gemm, layer_backward, gemm, layer, torch_layer.py into .dev/bV, this script to .dev/callV.sh; carry
# [".dev/bV", ".dev/callV.sh"]. ~300 s.
# 1. The commits after the last device call (876b3d0: box_out shared by the weight-gradient epilogues, the generic
#    layer_backward run; d9537dd: weight gradients with N = 200, M = 64): grouped_gemm and layer_backward, all.
# 2. The gemm bench's ratios with and without a rest before each timed block (MEGAMOE_BENCH_REST_MS=0 / 200,
#    alternating, two rounds): how much of the ours / cuBLAS spread is the power state.
# 3. The 30B layer and torch._grouped_mm's in the same call.
set -uo pipefail
cd "$(dirname "$0")/bV"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
for t in grouped_gemm layer_backward; do
  t0=$(date +%s); timeout 170 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; rc=$?
  echo "== $t rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$t.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/$t.txt | head -5
done
for round in 1 2; do
  for ms in 0 200; do
    late 420 && break
    t0=$(date +%s); MEGAMOE_BENCH_REST_MS=$ms MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > $OUT/gemm_rest${ms}_$round.txt 2>&1
    echo "== gemm rest $ms ms round $round rc $? in $(( $(date +%s) - t0 )) s"
    grep RESULT $OUT/gemm_rest${ms}_$round.txt | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/RESULT gemm Qwen3-//' | grep -o '^[^|]*|[^|]*|[^|]*' | cut -c1-160
  done
done
late 480 || { MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $?"; grep RESULT $OUT/layer.txt | grep -E 'forward Qwen|z saved' | cut -c1-220; }
late 540 || { MEGAMOE_BENCH_ONLY=30B MEGAMOE_TORCH_LOOP=0 timeout 60 python3 torch_layer.py > $OUT/torch.txt 2>&1; echo "== torch rc $?"; grep RESULT $OUT/torch.txt | cut -c1-150; }
echo "total $(( $(date +%s) - start )) s"

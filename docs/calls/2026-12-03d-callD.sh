#!/usr/bin/env bash
# Session 2026-12-03 (ninth), call D: main c8f3096 + docs/wip/fwd-combine.patch + docs/wip/wgrad-stagger.patch.
# 1. layer_forward (fwd-combine: the overlapped combine bitwise against the passes), 2. layer_backward with
# MEGAMOE_WGRAD_STAGGER_NS=3000, 3. layer bench 30B (phase 2: the combine by GEMM2's movers against the passes),
# 4. gemm bench 30B dW at stagger 0 / 6000 / 3000 / 9000 ns, alternating.
set -uo pipefail
cd "$(dirname "$0")/bD"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
t0=$(date +%s); timeout 120 ./layer_forward --include-ignored --test-threads=1 > $OUT/layer_forward.txt 2>&1; rc=$?
echo "== layer_forward rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_forward.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/layer_forward.txt | head -5
t0=$(date +%s); MEGAMOE_WGRAD_STAGGER_NS=3000 timeout 150 ./layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward.txt 2>&1; rc=$?
echo "== layer_backward (stagger 3000) rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/layer_backward.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/layer_backward.txt | head -5
t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer_1.txt 2>&1; echo "== layer run 1 rc $? in $(( $(date +%s) - t0 )) s"
grep RESULT $OUT/layer_1.txt | cut -c1-240
for round in 1 2; do
  for ns in 0 6000 3000 9000; do
    late 470 && break
    t0=$(date +%s); MEGAMOE_WGRAD_STAGGER_NS=$ns MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > /tmp/g.txt 2>&1; rc=$?
    cat /tmp/g.txt >> $OUT/gemm_$ns.txt
    echo "== stagger $ns ns, round $round: rc $rc in $(( $(date +%s) - t0 )) s"; grep RESULT /tmp/g.txt | grep dW | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/| rel err.*//; s/RESULT gemm Qwen3-//' | cut -c1-150
  done
done
late 520 || { t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer_2.txt 2>&1; echo "== layer run 2 rc $? in $(( $(date +%s) - t0 )) s"; grep RESULT $OUT/layer_2.txt | cut -c1-240; }
echo "total $(( $(date +%s) - start )) s"

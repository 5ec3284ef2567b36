#!/usr/bin/env bash
# Session 11 call A: (1) the 1.06 ms gap of the 30B fwd+bwd with main's layer bench (MEGAMOE_BENCH_PHASES=1, dmon);
# (2) wgrad ping-pong patch: its grouped_gemm tests, then gemm bench new/old/new/old.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
run() { local n=$1 to=$2; shift 2; local t0=$(date +%s); echo "== $n ($(( t0 - start )) s)"
  timeout $to "$@" > $OUT/$n.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "^test .*(FAILED|ignored)$|test result|panicked|FAILED|error" $OUT/$n.txt | grep -v "^test .* ok$" | head -12; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt 2>&1
nvidia-smi dmon -s pc -d 1 > $OUT/dmon.txt 2>&1 &
D=$!
echo "== phases ($(( $(date +%s) - start )) s)"
MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout 90 ../old/layer --bench > $OUT/layer_phases.txt 2>&1; echo "rc $?"
kill $D
grep -E "^RESULT" $OUT/layer_phases.txt | cut -c1-150
grep -E "^PHASES" $OUT/layer_phases.txt | cut -c1-200; grep -E "^PHASE " $OUT/layer_phases.txt | sort -k8 -n -r -t"," | head -0; grep "^PHASE " $OUT/layer_phases.txt | awk '{print}' | grep "z saved" | cut -c1-140
run t_prim 60 ../old/gpu_primitives --include-ignored --test-threads=1
run t_grouped_gemm 40 ./grouped_gemm --include-ignored --test-threads=1
for v in new old new old; do
  b=./gemm; [ $v = old ] && b=../old/gemm
  t0=$(date +%s); echo "== gemm $v ($(( t0 - start )) s)"
  timeout 100 $b --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  cat /tmp/g.txt >> $OUT/gemm_$v.txt
  grep RESULT /tmp/g.txt | grep -E "dW|FAILED" | sed 's/ (sample.*ours/ ours/; s/(throughput.*//' | cut -c1-170
  [ $(( $(date +%s) - start )) -gt 470 ] && break
done
echo "total $(( $(date +%s) - start )) s"

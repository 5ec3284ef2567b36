#!/usr/bin/env bash
# Session 11 call B: memory pool keeps freed memory (release threshold max) + wgrad box-0 wait fix.
# Layer bench new vs old (30B, phases), clock reasons sampled; then all GPU tests.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
run() { local n=$1 to=$2; shift 2; local t0=$(date +%s); echo "== $n ($(( t0 - start )) s)"
  timeout $to "$@" > $OUT/$n.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "^test .*(FAILED|ignored)$|test result|panicked|FAILED|error" $OUT/$n.txt | grep -v "^test .* ok$" | head -12; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active,clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,clocks_event_reasons.sw_thermal_slowdown --format=csv -lms 250 > $OUT/clocks.txt 2>&1 &
D=$!
for v in new old new; do
  b=./layer; [ $v = old ] && b=../old/layer
  echo "== layer $v ($(( $(date +%s) - start )) s)"
  MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout 90 $b --bench > $OUT/layer_$v.txt 2>&1; echo "rc $?"
  grep -hE "^RESULT|^PHASES" $OUT/layer_$v.txt | cut -c1-150
done
kill $D
awk -F, 'NR>1{print $2,$5}' $OUT/clocks.txt | sort | uniq -c | sort -rn | head -8
run t_grouped_gemm 40 ./grouped_gemm --include-ignored --test-threads=1
run t_layer_backward 150 ./layer_backward --include-ignored --test-threads=1
run t_layer_forward 90 ./layer_forward --include-ignored --test-threads=1
run t_ep 25 ./ep --include-ignored --test-threads=1 --skip qwen3
run t_prim 30 ./gpu_primitives --include-ignored --test-threads=1
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# Session 11 call C: wgrad epilogue from registers (MEGAMOE_WGRAD_EPI=direct) vs staged TMA, same binary.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
run() { local n=$1 to=$2; shift 2; local t0=$(date +%s); echo "== $n ($(( t0 - start )) s)"
  timeout $to "$@" > $OUT/$n.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "^test .*(FAILED|ignored)$|test result|panicked|FAILED|error" $OUT/$n.txt | grep -v "^test .* ok$" | head -12; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
MEGAMOE_WGRAD_EPI=direct run t_grouped_gemm_direct 40 ./grouped_gemm --include-ignored --test-threads=1
for v in direct staged direct staged; do
  t0=$(date +%s); echo "== gemm $v ($(( t0 - start )) s)"
  MEGAMOE_WGRAD_EPI=$v timeout 100 ./gemm --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  cat /tmp/g.txt >> $OUT/gemm_$v.txt
  grep RESULT /tmp/g.txt | grep -E "dW|FAILED" | sed 's/ (sample.*ours/ ours/; s/(throughput.*//' | cut -c1-170
  [ $(( $(date +%s) - start )) -gt 330 ] && break
done
for v in direct staged; do
  echo "== layer $v ($(( $(date +%s) - start )) s)"
  MEGAMOE_WGRAD_EPI=$v MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer_$v.txt 2>&1; echo "rc $?"
  grep -hE "^RESULT.*backward|^PHASES" $OUT/layer_$v.txt | cut -c1-150
  grep -h "wgrad" $OUT/layer_$v.txt | cut -c40-140
done
MEGAMOE_WGRAD_EPI=direct run t_layer_backward_direct 150 ./layer_backward --include-ignored --test-threads=1
echo "total $(( $(date +%s) - start )) s"

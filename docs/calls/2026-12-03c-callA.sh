#!/usr/bin/env bash
# Session 2026-12-03 (eighth), call A: bundle of branch wgrad-epi (docs/wip/wgrad-epilogues.patch + the persistent
# forward ffn_fused_fwd), carry [".dev/bundle", ".dev/callA.sh"].
# 1. Tests: the persistent forward and the overlapped gathers (layer_forward, filters persistent, overlapped), the weight-gradient epilogues (grouped_gemm,
#    filter wgrad; bitwise stg / shfl against tma), the layer backward with stg.
# 2. gemm bench 30B: MEGAMOE_WGRAD=tma / stg / shfl, two alternating rounds.
# 3. layer bench 30B: tma / stg / shfl, two rounds (each prints the persistent forward line too).
# Predicted: stg 5-8% faster on dW1 / dW2 (copy-engine waits ~11% of them); persistent forward 1-2% faster than
# two launches (GEMM1's tail of ~0.5 wave, ~15 us, and the launch gap).
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader
mkdir -p $OUT/t
run_t() { # binary filter wgrad timeout
  t0=$(date +%s)
  MEGAMOE_WGRAD=$3 timeout $4 ./$1 --include-ignored --test-threads=1 $2 > $OUT/t/$1.txt 2>&1; rc=$?
  echo "== $1 $2 (MEGAMOE_WGRAD=$3) rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/t/$1.txt | tail -1)"
  grep -E "FAILED|panicked|rel err" $OUT/t/$1.txt | head -12
}
run_t layer_forward "persistent overlapped" tma 200
run_t grouped_gemm wgrad tma 120
run_t layer_backward "" stg 150
(cd $OUT && tar czf tests.tgz t && rm -r t)
for round in 1 2; do
  for w in tma stg shfl; do
    late 330 && break
    t0=$(date +%s); echo "== gemm $w round $round ($(( t0 - start )) s)"
    MEGAMOE_WGRAD=$w MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
    cat /tmp/g.txt >> $OUT/gemm_$w.txt
    grep RESULT /tmp/g.txt | grep -E "dW" | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/| rel err.*//; s/RESULT gemm Qwen3-//' | cut -c1-160
  done
done
for round in 1 2; do
  for w in tma stg shfl; do
    late 510 && break
    echo "== layer $w round $round ($(( $(date +%s) - start )) s)"
    MEGAMOE_WGRAD=$w MEGAMOE_BENCH_ONLY=30B timeout 45 ./layer --bench >> $OUT/layer_$w.txt 2>&1; echo "rc $?"
    grep -hE "^RESULT" $OUT/layer_$w.txt | tail -5 | cut -c1-200
  done
done
echo "total $(( $(date +%s) - start )) s"

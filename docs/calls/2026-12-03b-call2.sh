#!/usr/bin/env bash
# Session 13 call 2: dh + SwiGLU backward with a 5-stage ring and one z slot per warpgroup (new) against
# 8f6f3b5's binaries (.dev/old: 4-stage ring, two z slots); the gemm bench with the batched cuBLAS reference;
# tests first (grouped_gemm, layer_backward, ep: every path of the SwiGLU backward), then gemm new/old twice,
# then the 30B layer new/old twice (new with the phase breakdown once).
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/t
for t in grouped_gemm layer_backward ep; do
  t0=$(date +%s)
  timeout 150 ./$t --include-ignored --test-threads=1 > $OUT/t/$t.txt 2>&1; rc=$?
  echo "== $t rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/t/$t.txt | tail -1)"
  grep -E "FAILED|panicked" $OUT/t/$t.txt | head -5
done
(cd $OUT && tar czf tests.tgz t && rm -r t)
for round in 1 2; do
  for v in new old; do
    late 330 && break
    b=./gemm; [ $v = old ] && b=../old/gemm
    t0=$(date +%s); echo "== gemm $v round $round ($(( t0 - start )) s)"
    timeout 75 $b --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
    cat /tmp/g.txt >> $OUT/gemm_$v.txt
    grep RESULT /tmp/g.txt | grep -E "dh" | sed 's/ (sample.*ours/ ours/; s/(throughput.*//; s/RESULT gemm Qwen3-//' | cut -c1-150
  done
done
for round in 1 2; do
  for v in new old; do
    late 470 && break
    b=./layer; [ $v = old ] && b=../old/layer
    ph=0; [ $v = new ] && [ $round = 1 ] && ph=1
    echo "== layer $v round $round ($(( $(date +%s) - start )) s)"
    MEGAMOE_BENCH_PHASES=$ph MEGAMOE_BENCH_ONLY=30B timeout 45 $b --bench >> $OUT/layer_$v.txt 2>&1; echo "rc $?"
    tail -4 $OUT/layer_$v.txt | grep -hE "^RESULT" | cut -c1-110
  done
done
echo "total $(( $(date +%s) - start )) s"

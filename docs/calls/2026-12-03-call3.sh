#!/usr/bin/env bash
# Session 12 call 3: the weight-gradient epilogue per warp (16 x 32 boxes, bar.warp.sync instead of 128-thread
# named barriers, conflict-free 8-byte staging stores) against main's (.dev/old, f31dcc7: same wgrad as
# land-s12 before this change). Tests first (wgrad ragged/accumulate/N % 256, the layer backward, EP), then the
# GEMM bench new / old twice, then the 30B layer new / old.
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
    late 360 && break
    b=./gemm; [ $v = old ] && b=../old/gemm
    t0=$(date +%s); echo "== gemm $v round $round ($(( t0 - start )) s)"
    timeout 60 $b --bench > /tmp/g.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
    cat /tmp/g.txt >> $OUT/gemm_$v.txt
    grep RESULT /tmp/g.txt | grep -E "dW|dh \+" | sed 's/ (sample.*ours/ ours/; s/(throughput.*//; s/RESULT gemm Qwen3-//' | cut -c1-150
  done
done
for v in new old; do
  late 440 && break
  b=./layer; [ $v = old ] && b=../old/layer
  echo "== layer $v ($(( $(date +%s) - start )) s)"
  MEGAMOE_BENCH_ONLY=30B timeout 40 $b --bench > $OUT/layer_$v.txt 2>&1; echo "rc $?"
  grep -hE "^RESULT" $OUT/layer_$v.txt | cut -c1-120
done
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# One device call for docs/wip/wgrad-pingpong.patch. Before it, here: the benches of main into .dev/old
# (`cargo xtask gpu-bundle .dev/oldb && mkdir -p .dev/old && cp .dev/oldb/gemm .dev/oldb/layer .dev/old/ &&
# rm -r .dev/oldb`: two whole bundles exceed the call's 64 MiB), then `git am docs/wip/wgrad-pingpong.patch`,
# `cargo xtask gpu-bundle .dev/bundle`, copy this script to .dev/ and run `bash .dev/call-wgrad-pp.sh` with
# `carry: [".dev"]`.
# Predicted: dW2 / dW1 0.76 / 0.75 -> ~0.8-0.85 of cuBLAS at 30B (the f32 epilogue under the other warpgroup's
# main loop, against a ~6% slower 128 x 128 main loop); keep it if the tests pass and both move.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
run() { # name timeout args...
  local n=$1 to=$2; shift 2
  local t0=$(date +%s)
  echo "== $n ($(( t0 - start )) s)"
  timeout $to "$@" > $OUT/$n.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  grep -E "^test .*(FAILED|ignored)$|test result|panicked|FAILED|error" $OUT/$n.txt | grep -v "^test .* ok$" | head -12
}
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
run t_grouped_gemm 40 ./grouped_gemm --include-ignored --test-threads=1
for v in new old new old; do
  b=./gemm; [ $v = old ] && b=../old/gemm
  echo "== gemm $v ($(( $(date +%s) - start )) s)"
  timeout 100 $b --bench > /tmp/g.txt 2>&1; echo "rc $?"
  cat /tmp/g.txt >> $OUT/gemm_$v.txt
  grep RESULT /tmp/g.txt | grep -E "dW|FAILED" | sed 's/ (sample.*ours/ ours/; s/(throughput.*//' | cut -c1-170
done
echo "== layer ($(( $(date +%s) - start )) s)"
MEGAMOE_BENCH_ONLY=30B timeout 50 ./layer --bench > $OUT/layer.txt 2>&1; echo "rc $?"
MEGAMOE_BENCH_ONLY=30B timeout 50 ../old/layer --bench > $OUT/layer_old.txt 2>&1; echo "rc $?"
grep -h RESULT $OUT/layer.txt $OUT/layer_old.txt | grep backward | cut -c1-110
run t_layer_backward 150 ./layer_backward --include-ignored --test-threads=1
run t_ep 25 ./ep --include-ignored --test-threads=1 --skip qwen3
echo "total $(( $(date +%s) - start )) s"

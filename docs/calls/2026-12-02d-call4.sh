#!/usr/bin/env bash
# hybrid (no active/half1 skipping): gemm bench, layer bench both shapes, tests
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
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > $OUT/gpu.txt 2>&1
echo "== gemm ($(( $(date +%s) - start )) s)"
timeout 100 ./gemm --bench > $OUT/gemm.txt 2>&1; echo "rc $?"
grep RESULT $OUT/gemm.txt | sed 's/ (sample.*ours/ ours/; s/(throughput.*//' | cut -c1-200
grep -E "FAILED|panicked" $OUT/gemm.txt | head -5
echo "== layer ($(( $(date +%s) - start )) s)"
timeout 150 ./layer --bench > $OUT/layer.txt 2>&1; echo "rc $?"
grep -h RESULT $OUT/layer.txt | cut -c1-160
run t_grouped_gemm 40 ./grouped_gemm --include-ignored --test-threads=1
run t_layer_backward 150 ./layer_backward --include-ignored --test-threads=1
run t_layer_forward 90 ./layer_forward --include-ignored --test-threads=1
run t_ep 25 ./ep --include-ignored --test-threads=1 --skip qwen3
echo "total $(( $(date +%s) - start )) s"

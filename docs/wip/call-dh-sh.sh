#!/usr/bin/env bash
# One device call for docs/wip/dh-sh-tma.patch (after `git am` it and `cargo xtask gpu-bundle .dev/bundle`; copy this
# script to .dev/ and run `bash .dev/call-dh-sh.sh` with `carry: [".dev"]`): tests, the 30B layer bench, the gemm bench
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
run() { # name timeout args...
  local n=$1 to=$2; shift 2
  echo "== $n ($(( $(date +%s) - start )) s)"
  timeout $to "$@" > /tmp/$n.txt 2>&1; echo "rc $?"
  grep -E "^test .*(FAILED|ignored)$|test result|panicked|^RESULT|FAILED|error" /tmp/$n.txt | grep -v "^test .* ok$" | head -20
}
run grouped_gemm 40 ./grouped_gemm --include-ignored --test-threads=1
run layer_backward 110 ./layer_backward --include-ignored --test-threads=1
run ep 20 ./ep --include-ignored --test-threads=1 --skip qwen3
for f in grouped_gemm layer_backward ep; do echo "######## $f"; cat /tmp/$f.txt; done > $OUT/tests.txt
echo "== layer bench ($(( $(date +%s) - start )) s)"
MEGAMOE_BENCH_ONLY=30B timeout 50 ./layer --bench > $OUT/layer_bench.txt 2>&1; echo "rc $?"; grep -E "RESULT|FAILED" $OUT/layer_bench.txt
echo "== gemm bench ($(( $(date +%s) - start )) s)"
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" timeout $(( 235 - ($(date +%s) - start) )) ./gemm --bench > $OUT/gemm_megamoe.txt 2>&1; echo "rc $?"
grep -E "RESULT|FAILED" $OUT/gemm_megamoe.txt | grep -E "dh|FAILED" 
echo "total $(( $(date +%s) - start )) s"

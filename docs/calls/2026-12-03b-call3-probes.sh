#!/usr/bin/env bash
# Session 13 call 3 (probes, experiment branch s13-probe): the gemm bench (main's kernels + the batched cuBLAS
# reference) as is; with the weight gradients' epilogue removed (MEGAMOE_PROBE_WGRAD=2) and with staging writes
# but no copy engine (=3); with uniform routing (every expert exactly 1024 rows: no partial tiles); as is again.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for v in base w2 w3 uni base2; do
  [ $(( $(date +%s) - start )) -gt 300 ] && break
  case $v in w2) export MEGAMOE_PROBE_WGRAD=2;; w3) export MEGAMOE_PROBE_WGRAD=3;; uni) unset MEGAMOE_PROBE_WGRAD; export MEGAMOE_PROBE_UNIFORM=1;; *) unset MEGAMOE_PROBE_WGRAD MEGAMOE_PROBE_UNIFORM;; esac
  t0=$(date +%s); echo "== gemm $v ($(( t0 - start )) s)"
  timeout 75 ./gemm --bench > $OUT/gemm_$v.txt 2>&1; echo "rc $? in $(( $(date +%s) - t0 )) s"
  grep RESULT $OUT/gemm_$v.txt | sed 's/(sample rel err[^)]*)//; s/(throughput; target[^)]*)//; s/| rel err.*//; s/RESULT gemm Qwen3-//; s/(M-grouped) //; s/(K-grouped) //; s/ M=.*: megamoe/:/; s/cuBLAS batched (128 x 1024)/b/' | cut -c1-150
done
echo "total $(( $(date +%s) - start )) s"

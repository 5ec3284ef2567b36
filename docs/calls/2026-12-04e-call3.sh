#!/usr/bin/env bash
# Twenty-first session, call 3: the committed default (GEMM1 + SwiGLU by epilogue warps, `grouped_gemm_swiglu_ew7`,
# unless MEGAMOE_SWIGLU=coop) checked as built: grouped_gemm, fp8, layer_forward; the gemm bench at 30B and 235B.
# Binaries: BDIR=.dev/b24 bash docs/calls/2026-12-04c-build.sh v grouped_gemm fp8 layer_forward. Carry [".dev/b24"].
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b24/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
for t in grouped_gemm fp8 layer_forward; do
  timeout 175 b24/v/$t --include-ignored --test-threads=1 > $OUT/r/$t.txt 2>&1
  echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/r/$t.txt)"
  grep -E "FAILED|panicked" $OUT/r/$t.txt | cut -c1-300 | head -6
done
for m in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$m timeout 90 b24/v/gemm --bench > $OUT/r/gemm_$m.txt 2>&1
  echo "== gemm $m rc $? at $(el) s"
  grep -E "RESULT gemm-alternating" $OUT/r/gemm_$m.txt | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((M|K)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \2: \5 \6 \7/"
done
echo "total $(el) s"

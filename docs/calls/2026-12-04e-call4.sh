#!/usr/bin/env bash
# Twenty-first session, call 4: skewed routing (users' ask 7: hot experts without slowdown cliffs). The gemm bench at
# 30B with random, zipf:0.5 and zipf:1.0 routing (MEGAMOE_BENCH_ROUTING), the layer bench at 30B random and zipf:1.0.
# Predicted (a host model of the weight gradients' round-robin tile schedule, tile cost = its expert's k-steps + 2):
# dW2 ~4.7% / ~13% and dW1 ~2.5% / ~5.5% slower than uniform at S = 0.5 / 1.0; the M-grouped GEMMs within +-2%.
# Binaries: BDIR=.dev/b25 bash docs/calls/2026-12-04c-build.sh z (main + the routing option). Carry [".dev/b25"].
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b25/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
for rt in random zipf:0.5 zipf:1.0; do
  MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 60 b25/z/gemm --bench > $OUT/r/gemm_30B_${rt/:/}.txt 2>&1
  echo "== gemm 30B $rt rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/gemm_30B_${rt/:/}.txt)"
  grep -E "RESULT gemm-alternating" $OUT/r/gemm_30B_${rt/:/}.txt | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((M|K)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \2: \5 \6 \7/"
done
for rt in random zipf:1.0; do
  MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 80 b25/z/layer --bench > $OUT/r/layer_30B_${rt/:/}.txt 2>&1
  echo "== layer 30B $rt rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/layer_30B_${rt/:/}.txt)"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_30B_${rt/:/}.txt | cut -c1-160
done
echo "total $(el) s"

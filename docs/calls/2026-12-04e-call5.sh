#!/usr/bin/env bash
# Twenty-first session, call 5: the weight gradients' tiles taken at run time (a grid-wide counter; `MEGAMOE_WGRAD_SCHED`
# = dynamic, the build's default, or static, the schedule before). Predicted from a host model of both schedules:
# at Zipf 1.0 routing dW2 -10..-13% and dW1 -5..-9% time against static (call 4 measured static 16% / 10% over
# uniform routing); with uniform routing within +-1%. Tests first (the wgrad cases of grouped_gemm incl. the new
# skewed static-against-dynamic case; a few quick layer_backward cases, which run the `_mv` kernels), then the gemm
# bench at 30B, then the rest of grouped_gemm.
# Binaries: BDIR=.dev/b26 bash docs/calls/2026-12-04c-build.sh d grouped_gemm layer_backward. Carry [".dev/b26"].
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b26/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
timeout 60 b26/d/grouped_gemm --include-ignored --test-threads=1 wgrad > $OUT/r/grouped_gemm_wgrad.txt 2>&1
echo "== grouped_gemm wgrad rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm_wgrad.txt)"
grep -E "FAILED|panicked" $OUT/r/grouped_gemm_wgrad.txt | cut -c1-300 | head -6
for v in zipf:1.0:dynamic zipf:1.0:static random:dynamic random:static; do
  rt=${v%:*}; sc=${v##*:}
  MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 40 b26/d/gemm --bench > $OUT/r/gemm_30B_${rt/:/}_$sc.txt 2>&1
  echo "== gemm 30B $rt $sc rc $? at $(el) s"
  grep -E "RESULT gemm-alternating .*dW" $OUT/r/gemm_30B_${rt/:/}_$sc.txt | sed -E "s/.*bwd ([^(]*(\([^)]*\))?) \(K-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
done
timeout 90 b26/d/layer_backward --include-ignored --test-threads=1 small ragged half_the bf16_weight_gradients_ragged > $OUT/r/layer_backward_some.txt 2>&1
echo "== layer_backward (some) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward_some.txt)"
grep -E "FAILED|panicked" $OUT/r/layer_backward_some.txt | cut -c1-300 | head -6
timeout 60 b26/d/grouped_gemm --include-ignored --test-threads=1 --skip wgrad > $OUT/r/grouped_gemm_rest.txt 2>&1
echo "== grouped_gemm rest rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm_rest.txt)"
grep -E "FAILED|panicked" $OUT/r/grouped_gemm_rest.txt | cut -c1-300 | head -6
echo "total $(el) s"

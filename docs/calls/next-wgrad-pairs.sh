#!/usr/bin/env bash
# SUPERSEDED (twenty-fourth session): run docs/calls/next-all-1.sh and next-all-2.sh instead (the same patch, merged
# with the other two into branch next-all, reviewed again, binaries .dev/b36); this script is kept for its reasoning.
# Prepared in the twenty-third session (not run). docs/wip/wgrad-cluster-pairs-runtime.patch (branch wgrad-pairs):
# the weight gradients' 2-CTA cluster form takes its pairs of m-tiles at run time, the cluster's leader taking each
# index from the device's tile counter and handing it to its peer through a two-slot channel in shared memory
# (`st.async` into the peer's slot, completing the peer's mbarrier; the peer's remote arrival gives the slot back).
# First the GPU tests (grouped_gemm whole: its cluster tests compare the cluster form bit for bit with the static
# single-CTA schedule, three launches each, incl. one hot expert among 199 mostly empty ones; the layer's cluster
# test), then the gemm bench at 30B, `MEGAMOE_WGRAD_SCHED=clusters` against the default (single-CTA, run time), in
# rotation with random routing, then Zipf 1.0 on one draw (`MEGAMOE_SEED`).
# Predicted: tests pass (a wrong hand-over shows as a hang, cut by the timeout, or as tiles missing or doubled:
# NaN or a bit difference); random routing: clusters 1-3% faster on dW1 / dW2 than the default, as the static
# pairs were in 2026-12-04g call 3; Zipf 1.0: the same 1-3% (the static pairs' walk models 6-13% over ideal there).
# Binaries .dev/b33/pairs (branch wgrad-pairs, 23e613a: `git checkout wgrad-pairs && BDIR=.dev/b33 bash
# docs/calls/2026-12-04c-build.sh pairs grouped_gemm layer_backward`). Command `bash docs/calls/next-wgrad-pairs.sh`,
# carry [".dev/b33"] (~3.5 min).
. "$(dirname "$0")/prelude.sh" b33
timeout 240 b33/pairs/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -6
timeout 60 b33/pairs/layer_backward clustered --include-ignored --test-threads=1 > $OUT/r/layer_backward.txt 2>&1
echo "== layer_backward clustered rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_backward.txt | cut -c1-300 | head -6
for v in dynamic:random clusters:random dynamic:random clusters:random dynamic:zipf clusters:zipf; do
  sc=${v%%:*}; rt=random; seed=""
  case $v in *:zipf) rt=zipf:1.0; seed=4242;; esac
  f=$OUT/r/gemm_${sc}_${rt/:/}_$(el).txt
  MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_SEED=${seed:-} MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 40 b33/pairs/gemm --bench > $f 2>&1
  echo "== gemm 30B $sc $rt rc $? at $(el) s"
  grep -E "^RESULT gemm .*bwd dW" $f | grep -oE "bwd dW[12]( bf16 out)?|rel err [0-9.e+-]+ \(8 rows|all written: [a-z]+" | paste -sd' '
  grep -E "RESULT gemm-alternating .*bwd dW" $f | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
done
echo "total $(el) s"

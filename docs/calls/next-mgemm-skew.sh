#!/usr/bin/env bash
# SUPERSEDED (twenty-fourth session): run docs/calls/next-all-1.sh and next-all-2.sh instead (the same patch, merged
# with the other two into branch next-all, reviewed again, binaries .dev/b36); this script is kept for its reasoning.
# Prepared in the twenty-third session (not run). docs/wip/mgemm-consumer-skew.patch (branch mgemm-skew): the
# M-grouped cooperative kernels' two consumer warpgroups skewed by `MEGAMOE_GEMM_SKEW` = 1..3 ring iterations of
# a tile (t1..t3: handed over at every tile), as docs/wip/wgrad-consumer-skew.patch does for the weight gradients:
# each warpgroup's epilogue runs under the other's main loop. In the layer GEMM2 (row-scattered, 12 k-steps a
# tile) and dx (24) are cooperative; GEMM1 + SwiGLU is by default the `_ew7` form (its epilogue already in other
# warps) and ignores the lead, as every dh + SwiGLU backward kernel does: its cooperative form (`MEGAMOE_SWIGLU=coop`,
# `_mv` in the layer, h and z stored: the heaviest epilogue, 32 k-steps a tile) is timed with the lead against
# `_ew7` here too (a review found the first version of this call predicting a GEMM1 gain the default never sees).
# Run it only after next-wgrad-skew.sh has shown the lead works (or alongside, if the budget allows).
# First the GPU tests (grouped_gemm whole: the new skew tests bit for bit against no lead, single-CTA and both
# cluster forms, ~900 tiles for the every-tile hand-over, scatter and cooperative SwiGLU under a lead;
# layer_forward with the cooperative SwiGLU and layer_backward small cases with the lead on), then the gemm bench
# at 30B: leads 0, 2, t2 with the default SwiGLU kernel, then 0, 2, t2 with the cooperative one; then the layer:
# lead 0, lead t2, and lead t2 with the cooperative SwiGLU.
# Predicted (lead 2 or t2): GEMM2 3-6% faster, dx 2-4%, plain GEMM1 / dh 1-3%; the cooperative GEMM1 + SwiGLU
# 3-6% faster than itself without a lead, i.e. about level with `_ew7` (0.95-0.96 of cuBLAS); the layer's forward
# -20..-40 us, forward + backward -60..-120 us (GEMM2 and dx). The weight gradients and dh + SwiGLU unchanged.
# Binaries .dev/b35/mskew (branch mgemm-skew, 2137a76: `git checkout mgemm-skew && BDIR=.dev/b35 bash
# docs/calls/2026-12-04c-build.sh mskew grouped_gemm layer_backward layer_forward`). Command
# `bash docs/calls/next-mgemm-skew.sh`, carry [".dev/b35"] (~7.5 min).
. "$(dirname "$0")/prelude.sh" b35
timeout 200 b35/mskew/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -6
MEGAMOE_SWIGLU=coop MEGAMOE_GEMM_SKEW=t2 timeout 90 b35/mskew/layer_forward small ragged one_token overlapped_gather_ragged persistent_forward_ragged --include-ignored --test-threads=1 > $OUT/r/layer_forward.txt 2>&1
echo "== layer_forward (lead t2, cooperative SwiGLU, small cases) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_forward.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_forward.txt | cut -c1-300 | head -6
MEGAMOE_GEMM_SKEW=2 timeout 90 b35/mskew/layer_backward small ragged one_token half_the_experts --include-ignored --test-threads=1 > $OUT/r/layer_backward.txt 2>&1
echo "== layer_backward (lead 2, small cases) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_backward.txt | cut -c1-300 | head -6
for v in 0:ew7 2:ew7 t2:ew7 0:coop 2:coop t2:coop; do
  sk=${v%%:*}; sw=${v#*:}
  f=$OUT/r/gemm_skew${sk}_${sw}_$(el).txt
  MEGAMOE_SWIGLU=$sw MEGAMOE_GEMM_SKEW=$sk MEGAMOE_BENCH_ONLY=30B timeout 40 b35/mskew/gemm --bench > $f 2>&1
  echo "== gemm 30B lead $sk SwiGLU $sw rc $? at $(el) s"
  grep -E "^RESULT gemm .*fwd|^RESULT gemm .*bwd d[hx]" $f | grep -oE "(fwd|bwd) [A-Za-z0-9 +]+|rel err [0-9.e+-]+|all written: [a-z]+" | paste -sd' ' | cut -c1-300
  grep -E "RESULT gemm-alternating .*M-grouped" $f | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
done
for v in 0:ew7 t2:ew7 t2:coop; do
  sk=${v%%:*}; sw=${v#*:}
  MEGAMOE_SWIGLU=$sw MEGAMOE_GEMM_SKEW=$sk MEGAMOE_BENCH_ONLY=30B timeout 90 b35/mskew/layer --bench > $OUT/r/layer_skew${sk}_$sw.txt 2>&1
  echo "== layer 30B lead $sk SwiGLU $sw rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_skew${sk}_$sw.txt | cut -c1-220
done
echo "total $(el) s"

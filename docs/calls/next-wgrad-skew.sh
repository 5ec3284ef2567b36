#!/usr/bin/env bash
# SUPERSEDED (twenty-fourth session): run docs/calls/next-all-1.sh and next-all-2.sh instead (the same patch, merged
# with the other two into branch next-all, reviewed again, binaries .dev/b36); this script is kept for its reasoning.
# Prepared in the twenty-third session (not run). docs/wip/wgrad-consumer-skew.patch (branch wgrad-skew): the
# weight gradients' two consumer warpgroups skewed by `MEGAMOE_WGRAD_SKEW` = 1..3 ring iterations of a tile,
# handed over at the first tile with rows (1, 2, 3: the dynamics keep it) or at every one (t1, t2, t3) (default 0:
# as main). Today both warpgroups end a tile together and run their epilogues together while the tensor cores idle
# (the seventh session's probe: the epilogue costs 15-19% of the f32 kernel). With a lead the first warpgroup's
# epilogue runs while the second finishes its last k-tiles alone, and the second's while the first starts the next
# tile, in the same 128 x 256 tile (ping-pong's overlap without its 128 x 128 tiles, which lost). The lead takes
# ring stages from covering the loads' latency (4 stages of ~0.7 us of one warpgroup's MMA at 1.45 GHz).
# First the GPU tests (grouped_gemm whole, with its new skew tests: bit for bit the static schedule at every lead,
# short and mostly empty blocks; layer_backward with MEGAMOE_WGRAD_SKEW=2), then the gemm bench at 30B with leads
# 0, 2, t2, 3, 0, 2, t2, 1 in rotation, and the layer with leads 0, 2 and t2.
# Predicted: lead 2: dW1 / dW2 f32 3-8% faster (0.75 -> 0.78-0.81 of cuBLAS), bf16 2-5%; lead 1 about half of
# that; lead 3 no better than 2 (one stage of latency cover left); t2 as 2 if the first tile's lead lasts
# (docs/studies/wgrad_consumer_skew.py says it does), better if it drifts back. The M-grouped GEMMs unchanged (not touched).
# Layer fwd + bwd (f32 weight gradients) -60..-150 us with lead 2. A hang (cut by the timeouts) or a bit difference
# in the tests means the hand-over is wrong.
# Binaries .dev/b34/skew (branch wgrad-skew, c19b6ac: `git checkout wgrad-skew && BDIR=.dev/b34 bash
# docs/calls/2026-12-04c-build.sh skew grouped_gemm layer_backward`). Command `bash docs/calls/next-wgrad-skew.sh`,
# carry [".dev/b34"] (~8 min).
. "$(dirname "$0")/prelude.sh" b34
timeout 300 b34/skew/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -6
MEGAMOE_WGRAD_SKEW=2 timeout 150 b34/skew/layer_backward small ragged bf16 one_token clustered --include-ignored --test-threads=1 > $OUT/r/layer_backward.txt 2>&1
echo "== layer_backward (lead 2: small cases, bf16, clustered) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_backward.txt | cut -c1-300 | head -6
for v in 0 2 t2 3 0 2 t2 1; do
  f=$OUT/r/gemm_skew${v}_$(el).txt
  MEGAMOE_WGRAD_SKEW=$v MEGAMOE_BENCH_ONLY=30B timeout 40 b34/skew/gemm --bench > $f 2>&1
  echo "== gemm 30B lead $v rc $? at $(el) s"
  grep -E "^RESULT gemm .*bwd dW" $f | grep -oE "bwd dW[12]( bf16 out)?|rel err [0-9.e+-]+ \(8 rows|all written: [a-z]+" | paste -sd' '
  grep -E "RESULT gemm-alternating .*bwd dW" $f | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
done
for v in 0 2 t2; do
  MEGAMOE_WGRAD_SKEW=$v MEGAMOE_BENCH_ONLY=30B timeout 90 b34/skew/layer --bench > $OUT/r/layer_skew$v.txt 2>&1
  echo "== layer 30B lead $v rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward\+backward \(z saved)" $OUT/r/layer_skew$v.txt | cut -c1-220
done
echo "total $(el) s"

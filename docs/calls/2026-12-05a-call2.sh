#!/usr/bin/env bash
# Twenty-sixth session, call 2 (replaces next-all-2.sh after call 1 found the leads and the run-time pairs level
# with main's kernels at random routing: no knob to rotate in the layer). Binaries .dev/b38/all (branch
# next-all-dy-g 558e40a). Call 1's test lines were cut from the output (only the last 12,000 characters come back
# and $OUT's files are limited in count), so the tests run again here, every raw file in one archive.
# Predicted: tests pass; the weight gradients' run-time pairs at Zipf 1.0 1-3% faster than single-CTA; forward +
# backward with z recomputed -150..-200 us with dy in the recompute, the other lines unchanged.
. "$(dirname "$0")/prelude.sh" b38
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
t() { local n=$1 to=$2; shift 2; timeout $to b38/all/$n "$@" --include-ignored --test-threads=1 > $OUT/r/t_$n$T.txt 2>&1
  echo "== $n$T rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n$T.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_$n$T.txt | cut -c1-300 | head -6; }
T= t grouped_gemm 240
T=_sub t layer_backward 150 small ragged one_token half_the_experts bf16 dy_in_recompute saved_state
T=_sub t layer_forward 60 small ragged one_token overlapped_gather_ragged persistent_forward_ragged
for v in dynamic clusters; do
  f=$OUT/r/gemm_${v}_zipf1.0_$(el).txt
  MEGAMOE_WGRAD_SCHED=$v MEGAMOE_SEED=4242 MEGAMOE_BENCH_ROUTING=zipf:1.0 MEGAMOE_BENCH_ONLY=30B timeout 40 b38/all/gemm --bench > $f 2>&1
  echo "== gemm 30B $v zipf:1.0 rc $? at $(el) s"
  grep -E "RESULT gemm-alternating" $f | grep dW | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/" | paste -sd'|' | sed 's/  */ /g'
done
for v in pass recompute pass recompute; do
  f=$OUT/r/layer_dy${v}_$(el).txt
  MEGAMOE_DY_GATHER=$v MEGAMOE_BENCH_ONLY=30B timeout 75 b38/all/layer --bench > $f 2>&1
  echo "== layer 30B dy $v rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z (saved|recomputed)\) )" $f | cut -c1-220
done
T= t fp8 100
T= t ep 100
echo "total $(el) s"

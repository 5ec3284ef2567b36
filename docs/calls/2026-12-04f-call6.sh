#!/usr/bin/env bash
# Call 6 of 2026-12-04f: busiest first against expert order on the same routing draws (MEGAMOE_SEED: the same
# experts hot in both binaries), gemm bench at 30B under Zipf 1.0, three seeds, binaries .dev/b27/lpt (busiest
# first) and .dev/b27/base (expert order; see call 1's header). Predicted: lpt within ~1% of its uniform time on
# every seed; base 1-9% slower than lpt on dW2 depending on where the seed puts the hot experts.
# Command `bash docs/calls/2026-12-04f-call6.sh`, carry [".dev/b27"].
. "$(dirname "$0")/prelude.sh" b27
for seed in 11 22 33; do
  for b in lpt base; do
    MEGAMOE_SEED=$seed MEGAMOE_BENCH_ROUTING=zipf:1.0 MEGAMOE_BENCH_ONLY=30B timeout 40 b27/$b/gemm --bench > $OUT/r/gemm_seed${seed}_$b.txt 2>&1
    echo "== seed $seed $b rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/gemm_seed${seed}_$b.txt)"
    grep -E "RESULT gemm-alternating .*dW" $OUT/r/gemm_seed${seed}_$b.txt | sed -E "s/.*bwd ([^(]*(\([^)]*\))?) \(K-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
  done
done
echo "total $(el) s"

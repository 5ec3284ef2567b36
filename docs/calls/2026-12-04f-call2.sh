#!/usr/bin/env bash
# Call 2 of 2026-12-04f (prepared in the twenty-first session as next-wgrad-busiest-first-b.sh). Call B of docs/wip/wgrad-busiest-first.patch (see call 1's header): the
# timings. gemm bench at 30B, Zipf 1.0 and uniform routing, the patch (busiest first) against main's
# run-time schedule (expert order); the FP8 weight gradients at Zipf 1.0 run-time against static (same binary); the
# layer at 30B under Zipf 1.0.
# Predicted: bf16/f32 dW2 at Zipf 1.0 914 -> ~850 us (host model: busiest first ~0.1-0.4% over ideal, expert order
# 1-5%), dW1 unchanged (~1600); uniform routing unchanged (+-1%); FP8 weight gradients at Zipf 1.0 6-9% faster
# run-time than static (as the bf16 kernel's were).
# Command `bash docs/calls/next-wgrad-busiest-first-b.sh`, carry [".dev/b27"] (~5 min). Binaries: call A's header.
. "$(dirname "$0")/prelude.sh" b27
for v in lpt:zipf:1.0 base:zipf:1.0 lpt:random base:random; do
  b=${v%%:*}; rt=${v#*:}
  MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 40 b27/$b/gemm --bench > $OUT/r/gemm_30B_${rt/:/}_$b.txt 2>&1
  echo "== gemm 30B $rt $b rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/gemm_30B_${rt/:/}_$b.txt)"
  grep -E "RESULT gemm-alternating .*dW" $OUT/r/gemm_30B_${rt/:/}_$b.txt | sed -E "s/.*bwd ([^(]*(\([^)]*\))?) \(K-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
done
for sc in dynamic static; do
  MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_BENCH_FP8_WGRAD=only MEGAMOE_BENCH_ROUTING=zipf:1.0 MEGAMOE_BENCH_ONLY=30B \
    timeout 60 b27/lpt/fp8_bench --bench > $OUT/r/fp8_wgrad_zipf1.0_$sc.txt 2>&1
  echo "== fp8 wgrad 30B zipf:1.0 $sc rc $? at $(el) s"
  grep -E "^RESULT" $OUT/r/fp8_wgrad_zipf1.0_$sc.txt | cut -c1-200
done
MEGAMOE_BENCH_ROUTING=zipf:1.0 MEGAMOE_BENCH_ONLY=30B timeout 80 b27/lpt/layer --bench > $OUT/r/layer_30B_zipf1.0.txt 2>&1
echo "== layer 30B zipf:1.0 rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/layer_30B_zipf1.0.txt)"
grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_30B_zipf1.0.txt | cut -c1-160
echo "total $(el) s"

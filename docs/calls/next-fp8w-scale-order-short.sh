#!/usr/bin/env bash
# next-fp8w-scale-order.sh cut to what decides (the device budget was short after ~10 failed starts): b111's twins
# test, b111's fp8 bench at 30B (timelines of the wide kernel and its twins, the twins timed beside it), b114's fp8
# bench at 30B (every wide kernel with the products late: GEMM1 + SwiGLU and the FP8 layer forward against b111's
# lines). Carry [".dev/b111", ".dev/b114"]. Predictions as in next-fp8w-scale-order.sh.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b111
for f in b114/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-170}
B=b111/main
t fp8 40 100 wide
MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=30B timeout $(to 60 45) $B/fp8_bench --bench > $OUT/r/fp8_bench_30B.txt 2>&1
echo "== fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8-timeline|FAILED|panicked" $OUT/r/fp8_bench_30B.txt | cut -c1-330
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
grep -E "RESULT fp8 .*(SwiGLU|layer)" $OUT/r/fp8_bench_30B.txt | grep -oE "^RESULT fp8 [^|]*\| FP8 [0-9]+ us" | head -4
MEGAMOE_BENCH_ONLY=30B timeout $(to 45 0) b114/late/fp8_bench --bench > $OUT/r/fp8_bench_30B_late.txt 2>&1
echo "== late fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B_late.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
grep -E "RESULT fp8 .*(SwiGLU|layer)" $OUT/r/fp8_bench_30B_late.txt | grep -oE "^RESULT fp8 [^|]*\| FP8 [0-9]+ us" | head -4
echo "total $(el) s"

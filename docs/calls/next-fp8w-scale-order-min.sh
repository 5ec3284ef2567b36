#!/usr/bin/env bash
# next-fp8w-scale-order-short.sh without the test binary (the benches check the twins bitwise against the staged
# kernel at 30B themselves): b111's fp8 bench at 30B, then b114's. Carry [".dev/b111", ".dev/b114"] (~45 s).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b111
for f in b114/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-100}
MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=30B timeout $(to 50 40) b111/main/fp8_bench --bench > $OUT/r/fp8_bench_30B.txt 2>&1
echo "== fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8-timeline|FAILED|panicked" $OUT/r/fp8_bench_30B.txt | cut -c1-330
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
grep -E "RESULT fp8 .*(SwiGLU|layer)" $OUT/r/fp8_bench_30B.txt | grep -oE "^RESULT fp8 [^|]*\| FP8 [0-9]+ us" | head -4
MEGAMOE_BENCH_ONLY=30B timeout $(to 40 0) b114/late/fp8_bench --bench > $OUT/r/fp8_bench_30B_late.txt 2>&1
echo "== late fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B_late.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
grep -E "RESULT fp8 .*(SwiGLU|layer)" $OUT/r/fp8_bench_30B_late.txt | grep -oE "^RESULT fp8 [^|]*\| FP8 [0-9]+ us" | head -4
echo "total $(el) s"

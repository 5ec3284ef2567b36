#!/usr/bin/env bash
# Forty-sixth session (any card): the wide FP8 kernel's scale products. The timeline (2026-12-06i call 1) showed
# half 0 of each 128-deep block holding the pipe ~120 cycles longer than half 1 (median 376 against 301; 256 at the
# rate), and the SASS has ptxas's four scale products (waiting on the block's four scale loads) placed between
# half 0's first and second wgmma. b111 = main with the twins `_sl` (the products after half 0's wait, through a
# data dependence on its partial) and `_sla` (also the scales loaded a block ahead), each also as a timeline kernel.
# Predicted: `_sl` 1.05-1.15x the wide kernel at 30B GEMM1 and GEMM2 (half 0's excess mostly gone: k-block
# ~1420 -> ~1250 cycles), `_sla` the same or a little better; bitwise the wide kernel. If half 0 stays slow in the
# `_sl` timeline, the wait is the stage's (the producer) and the scales are not it.
# Then b114 (branch late-default: the products after half 0's wait in every wide FP8 kernel, the SwiGLU forms,
# the gathers and the side copy included): its fp8 tests whole and its fp8 bench at 30B, whose lines (the wide
# kernel, GEMM1 + SwiGLU, the FP8 layer forward) set against b111's above tell what the default would gain.
# Carry [".dev/b111", ".dev/b114"].
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b111
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-330}
B=b111/main
t fp8 60 260 wide
MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=30B timeout $(to 90 200) $B/fp8_bench --bench > $OUT/r/fp8_bench_30B.txt 2>&1
echo "== fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8-timeline|FAILED|panicked" $OUT/r/fp8_bench_30B.txt | cut -c1-400
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
MEGAMOE_BENCH_ONLY=235B timeout $(to 60 170) $B/fp8_bench --bench > $OUT/r/fp8_bench_235B.txt 2>&1
echo "== fp8_bench 235B rc $? at $(el) s"
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_235B.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
grep -E "RESULT fp8 .*(SwiGLU|layer)" $OUT/r/fp8_bench_30B.txt | grep -oE "^RESULT fp8 [^|]*\| FP8 [0-9]+ us|FP8 [0-9]+ us" | head -4
B=b114/late
for f in b114/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
mv $OUT/r/t_fp8.txt $OUT/r/t_fp8_b111.txt
t fp8 140 40
MEGAMOE_BENCH_ONLY=30B timeout $(to 40 0) $B/fp8_bench --bench > $OUT/r/fp8_bench_30B_late.txt 2>&1
echo "== late fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B_late.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
grep -E "RESULT fp8 .*(SwiGLU|layer)" $OUT/r/fp8_bench_30B_late.txt | grep -oE "^RESULT fp8 [^|]*\| FP8 [0-9]+ us" | head -4
echo "total $(el) s"

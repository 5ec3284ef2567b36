#!/usr/bin/env bash
# Forty-sixth session (any card): the wide FP8 kernel's scale products. The timeline (2026-12-06i call 1) showed
# half 0 of each 128-deep block holding the pipe ~120 cycles longer than half 1 (median 376 against 301; 256 at the
# rate), and the SASS has ptxas's four scale products (waiting on the block's four scale loads) placed between
# half 0's first and second wgmma. b111 = main with the twins `_sl` (the products after half 0's wait, through a
# data dependence on its partial) and `_sla` (also the scales loaded a block ahead), each also as a timeline kernel.
# Predicted: `_sl` 1.05-1.15x the wide kernel at 30B GEMM1 and GEMM2 (half 0's excess mostly gone: k-block
# ~1420 -> ~1250 cycles), `_sla` the same or a little better; bitwise the wide kernel. If half 0 stays slow in the
# `_sl` timeline, the wait is the stage's (the producer) and the scales are not it.
# Carry [".dev/b111"].
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b111
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-200}
B=b111/main
t fp8 60 130 wide
MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=30B timeout $(to 90 30) $B/fp8_bench --bench > $OUT/r/fp8_bench_30B.txt 2>&1
echo "== fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8-timeline|FAILED|panicked" $OUT/r/fp8_bench_30B.txt | cut -c1-400
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
MEGAMOE_BENCH_ONLY=235B timeout $(to 60 5) $B/fp8_bench --bench > $OUT/r/fp8_bench_235B.txt 2>&1
echo "== fp8_bench 235B rc $? at $(el) s"
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_235B.txt | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
echo "total $(el) s"

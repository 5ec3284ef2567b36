#!/usr/bin/env bash
# Forty-seventh session (any card): the halves-in-turn probe's timeline (`grouped_gemm_fp8w_probe1_timeline`: the
# wide kernel's main loop with no promotion and no scale loads, each half issued and waited for in turn), beside the
# wide kernel's and the no-load probe's, at 30B. b116 = main + that probe. Question: is a block's first half still
# slower than its second (~380 against ~300 cycles of the pipe in the wide kernel, loads or not, 2026-12-06j calls
# 1-2) without the promotion and the scales? A lone half (the other warpgroup idle) takes ~365 cycles from issue to
# its wait's return against 256 at the rate (call 2's records), so each warpgroup's chain per block (two halves, two
# promotions) is ~1050-1150 cycles against the pipe's 1024 for both.
# Predicted: probe1's halves both ~256-300 (no promotion: the chain is ~2 x 365 a block, under the pipe's 1024), its
# block ~1100-1250 cycles. Carry [".dev/b116"], ~40 s.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b116
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b116/main
BOUND=${BOUND:-120}
MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=30B timeout $(to 70 5) $B/fp8_bench --bench > $OUT/r/fp8_bench_30B.txt 2>&1
echo "== fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8-timeline.*(WideTimeline|NoLoad|Probe1)|FAILED|panicked" $OUT/r/fp8_bench_30B.txt | cut -c1-330
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B.txt | grep -oE "^RESULT fp8 [^:]*|128 x 256 tiles [0-9]+ us|halves in turn [0-9]+ us|halves straight [0-9]+ us|no-load.*" | paste -sd' ' | sed 's/RESULT fp8/\n /g'
for f in $OUT/r/timeline*GEMM1*-WideTimeline.bin $OUT/r/timeline*GEMM1*Probe1Timeline.bin; do python3 ../benches/fp8w_timeline.py "$f" 2>/dev/null | head -4; done
echo "total $(el) s"

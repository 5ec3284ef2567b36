#!/usr/bin/env bash
# Forty-sixth session (any card): the wide FP8 kernel's scale products. The timeline (2026-12-06i call 1) showed
# each 128-deep block's first half holding the pipe 350-507 cycles against 256-306 for its second (256 at the
# rate), and the SASS has ptxas's four scale products (waiting on the block's four scale loads) placed between
# half 0's first and second wgmma. b111 = main defdcfa with the twins `_sl` (the products after half 0's wait,
# through a data dependence on its partial) and `_sla` (also the scales loaded a block ahead), each also as a
# timeline kernel. b114 = the same fix in every wide FP8 kernel (docs/wip/fp8w-late-scales.patch's kernels).
# Predicted: `_sl` 1.15-1.25x the wide kernel at 30B GEMM1 and GEMM2 (a block ~1420 -> ~1120-1180 cycles), `_sla`
# the same or a little better; bitwise the wide kernel. If half 0 stays slow in the `_sl` timeline, the wait is
# the stage's (the producer) and the scales are not it. b114's lines (GEMM1 + SwiGLU, the FP8 layer forward)
# against b111's tell what the default would gain.
# Carry [".dev/b111", ".dev/b114"]. MODE (short of device time): full (default, ~4 min: b111's twins test, its
# bench at 30B and 235B, b114's fp8 tests whole and its bench at 30B), short (~2 min: no 235B, no b114 tests), min
# (~45 s: the two 30B benches alone; they check the twins bitwise themselves).
MODE=${MODE:-full}
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) MODE=$MODE"
. "$(dirname "$0")/prelude.sh" b111
for f in b114/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
case $MODE in full) BOUND=${BOUND:-330};; short) BOUND=${BOUND:-170};; *) BOUND=${BOUND:-100};; esac
# the wide kernel's lines of fp8 bench output FILE: the wide kernel and its twins, GEMM1 + SwiGLU, the layer forward
lines() {
  grep -E "RESULT fp8 .*M=" $1 | grep -oE "128 x 256 tiles [0-9]+ us|twins.*" | head -4
  grep -E "RESULT fp8 .*(SwiGLU|layer)" $1 | grep -oE "^RESULT fp8 [^|]*\| FP8 [0-9]+ us" | head -4; }
B=b111/main
[ $MODE = min ] || t fp8 40 $([ $MODE = full ] && echo 260 || echo 100) wide
MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=30B timeout $(to 60 $([ $MODE = full ] && echo 200 || echo 45)) \
  $B/fp8_bench --bench > $OUT/r/fp8_bench_30B.txt 2>&1
echo "== fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8-timeline|FAILED|panicked" $OUT/r/fp8_bench_30B.txt | cut -c1-330
lines $OUT/r/fp8_bench_30B.txt
if [ $MODE = full ]; then
  MEGAMOE_BENCH_ONLY=235B timeout $(to 60 170) $B/fp8_bench --bench > $OUT/r/fp8_bench_235B.txt 2>&1
  echo "== fp8_bench 235B rc $? at $(el) s"
  lines $OUT/r/fp8_bench_235B.txt
  mv $OUT/r/t_fp8.txt $OUT/r/t_fp8_b111.txt
  B=b114/late
  t fp8 140 40
fi
MEGAMOE_BENCH_ONLY=30B timeout $(to 40 0) b114/late/fp8_bench --bench > $OUT/r/fp8_bench_30B_late.txt 2>&1
echo "== late fp8_bench 30B rc $? at $(el) s"
lines $OUT/r/fp8_bench_30B_late.txt
echo "total $(el) s"

#!/usr/bin/env bash
# Forty-seventh session (any card): the FP8 GEMM in 128 x 192 tiles (`grouped_gemm_fp8w192`, `Fp8Variant::Wide192`:
# each warpgroup one commit group of four wgmma m64n192k32 and one promotion a 128-deep block, where the wide kernel
# runs two halves and two promotions in turn), and `_ahead` (each next block's stage wait, descriptors and scale
# loads while this block's wgmma run), and the wide kernel's own `_ahead` (`Fp8Variant::WideAhead`: the next block's
# stage wait and scale loads during the current block's half 1; with its timeline). b117 = main + those kernels: fp8
# bench and fp8 tests.
# Why (docs/RESULTS.md 2026-12-06j calls 2-3): the wide kernel's warpgroups each run a serial chain of ~1150-1250
# cycles a block (a half returns ~370-400 cycles after its issue, a promotion ~160) against 1024 cycles of pipe for
# both; here a chain of ~800 (one return ~500, 96 FFMA ~200, the block's turn ~100) against 768.
# Predicted: bitwise the staged kernel (tests and the bench's check); 30B GEMM1 plain (N 1536) and 235B GEMM1 (N 3072)
# 1.05-1.15x the wide kernel (821 -> 715-780 us at 30B), `_ahead` 1-5% more; the wide `_ahead` 1.02-1.07x at
# every GEMM (a block's first half ~90 cycles shorter on the chain: half 0's service ~383 -> ~300-330); the 192
# tiles not at GEMM2 (N 2048, 4096: not a multiple of 384).
# If it is level or slower: the chain model is wrong where it counts (the promotion's FFMA then cost the pipe
# directly, or the data path caps the 192 tiles at their 1.11x bytes per FLOP; the no-load probe would split them).
# Carry [".dev/b117"], ~3.5 min; MODE=short (~2 min: the bench at 30B alone), MODE=min (~1.5 min: short without
# memcheck).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b117
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b117/main
BOUND=${BOUND:-300}
MODE=${MODE:-full}
t fp8 90 200 gemm_
grep -E "gemm_(192|wide_ahead)" $OUT/r/t_fp8.txt | head -4
if [ $MODE != min ]; then
timeout $(to 60 150) compute-sanitizer --tool memcheck --error-exitcode 9 $B/fp8 gemm_192_tiles_give --include-ignored --test-threads=1 > $OUT/r/memcheck.txt 2>&1
echo "== memcheck gemm_192 rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck.txt | tr '\n' ' ')"
fi
for sh in 30B $([ $MODE = full ] && echo 235B); do
  MEGAMOE_BENCH_ONLY=$sh timeout $(to 70 5) $B/fp8_bench --bench > $OUT/r/fp8_bench_$sh.txt 2>&1
  echo "== fp8_bench $sh rc $? at $(el) s"
  grep -E "FAILED|panicked" $OUT/r/fp8_bench_$sh.txt | head -3 | cut -c1-300
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_$sh.txt | grep -oE "^RESULT fp8 [^:]*|FP8 [0-9]+ us|128 x 256 tiles [0-9]+ us|halves straight [0-9]+ us|next turn ahead [^|]*|128 x 192 tiles.*" | paste -sd' ' | sed 's/RESULT fp8/\n /g'
done
grep -E "RESULT fp8-timeline.*(WideTimeline|WideAheadTimeline)" $OUT/r/fp8_bench_30B.txt | cut -c1-330
echo "total $(el) s"

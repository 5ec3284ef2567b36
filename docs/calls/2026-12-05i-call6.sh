#!/usr/bin/env bash
# Thirty-fourth session, call 6: the f32 weight gradients with the whole tile staged (`MEGAMOE_WGRAD_TILE=192|128`:
# `grouped_wgrad_f32*_n192*` 128 x 192, 3 stages, six staging boxes a warp; `_n128*` 128 x 128, 5 stages, four),
# DeepGEMM's layout: a tile's epilogue waits only for the previous tile's stores, not for the copy engine's reads
# box by box (call 3's ncu: our dW2 1.088x cuBLAS batched's time with 2.3x its barrier stalls; the seventh
# session's probe: without the waits 0.79-0.84 of dense against 0.65-0.75). b62 = main with the kernels, not yet
# committed when built. Carry [".dev/b62"] (~4 min, self-limited).
# Predicted: tests bitwise the 128 x 256 kernels; 30B f32 dW2 / dW1 against cuBLAS dense alternating: 256 ~0.75,
# 192 0.78-0.82, 128 0.74-0.80 (more L2 bytes a FLOP, five stages). If 192 gains beyond the spread: default 192
# (host/src/gemm.rs `wgrad_tile`), then the layer's step.
. "$(dirname "$0")/prelude.sh" b62
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b62/main
BOUND=${BOUND:-270}
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t grouped_gemm 60 200 wgrad_tiles
grep -h "test .* ok$" $OUT/r/t_grouped_gemm.txt | head -8
cp $OUT/r/t_grouped_gemm.txt $OUT/r/t_grouped_gemm_tiles.txt
t grouped_gemm 40 180 rows_past_the_end
t layer_backward 60 130 wgrad_tiles_match
timeout $(to 40 110) compute-sanitizer --tool memcheck --error-exitcode 3 $B/grouped_gemm wgrad_tiles_agree_ragged_edges \
  --exact --include-ignored > $OUT/r/memcheck.txt 2>&1
echo "== memcheck rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck.txt | tr '\n' ' ')"
MEGAMOE_BENCH_PART=wgrad MEGAMOE_BENCH_ONLY=30B timeout $(to 100 0) $B/gemm --bench > $OUT/r/gemm.txt 2>&1
echo "== gemm (wgrad part) rc $? at $(el) s"
grep -h "^RESULT gemm " $OUT/r/gemm.txt | cut -c1-200
alt_summary $OUT/r/gemm.txt
grep -E "FAILED|panicked|Error" $OUT/r/gemm.txt | head -4
echo "total $(el) s"

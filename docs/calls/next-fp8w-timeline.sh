#!/usr/bin/env bash
# Forty-fifth session, fourth call (any card): the FP8 promotion's length on the GPU's clock. b109 = main with
# `grouped_gemm_fp8w_timeline` (the wide kernel, the same C, whose consumer warps' lane 0 store `%clock64` at five
# points of 16 k-blocks of each block's second tile) on the fp8 bench's `RESULT fp8-timeline` lines (medians in
# cycles). Carry [".dev/b109"]; `BIN=b110` (main with the raw dump): carry [".dev/b110"].
# Predicted (30B GEMM1 plain, K = 2048): a k-block ~1600-2200 cycles (860 us over an SM's ~790 tile k-blocks, at
# 1.75-1.98 GHz; the whole k-block's wgmma at the datasheet rate ~1024); half 1's issue + wgmma ~500 (its own 256 and the other warpgroup's half queued before it);
# each promotion 150-400. P ~ 400: the FFMA run is serialised (against the other warpgroup's wgmma in the register
# file); P ~ 150 with half 1's wgmma well over 512: the pipe does not run the two warpgroups' queues back to back.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BIN=${BIN:-b109}
. "$(dirname "$0")/prelude.sh" $BIN
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-100}
B=$BIN/main
# the raw records too (b110 on: the bench writes them where MEGAMOE_TIMELINE_DUMP says)
MEGAMOE_TIMELINE_DUMP=$OUT/r MEGAMOE_BENCH_ONLY=30B timeout $(to 90 5) $B/fp8_bench --bench > $OUT/r/fp8_bench_30B.txt 2>&1
echo "== fp8_bench 30B rc $? at $(el) s"
grep -E "RESULT fp8-timeline|FAILED|panicked" $OUT/r/fp8_bench_30B.txt | cut -c1-400
grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_30B.txt | grep -oE "128 x 256 tiles [0-9]+ us" | head -2
echo "total $(el) s"

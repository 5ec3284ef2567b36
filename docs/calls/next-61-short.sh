#!/usr/bin/env bash
# next-61.sh cut to what a short call can hold (~3 min): the layer at 7B n=256 under MEGAMOE_DX_COMBINE=auto (the
# three "dx summed by ..." lines, each way's dx checked against the f64 reference, and the PHASE lines), then the
# movers / prefetch / pass bitwise tests (bf16, FP8). Predictions as next-61.sh. Carry [".dev/b140"].
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b140
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-200}
B=b140/main
env MEGAMOE_DX_COMBINE=auto MEGAMOE_DSW=ew7n MEGAMOE_BENCH_SHAPE=1536,256,128,8,24576 MEGAMOE_BENCH_HEAT=1 \
  MEGAMOE_BENCH_PHASES=1 timeout $(to 110 45) $B/layer --bench > $OUT/r/layer_7b.txt 2>&1
echo "== layer 7b rc $? at $(el) s"
grep -hE "^RESULT megamoe forward\+backward \(z saved, bf16 weight gradients\)" $OUT/r/layer_7b.txt | cut -c1-260
grep -hE "^PHASE" $OUT/r/layer_7b.txt | grep -E "wgrad|combine_rows|dswiglu" | cut -c1-160 | head -12
grep -hoE "rel err dx [^ ]+ dtopk [^ ]+" $OUT/r/layer_7b.txt | head -2
grep -hE "FAILED|panicked|Error" $OUT/r/layer_7b.txt | head -3
t layer_forward 70 15 in_producer_dx_combine
t fp8 40 3 backward_fp8_dx_combine
echo "total $(el) s"

#!/usr/bin/env bash
# Fifty-sixth session: main 63f0ed5's GPU tests with dx's combine by the rule by default (the pass below I = 512)
# and the movers' prefetch retired; b141 = that tree (layer_forward, layer_backward, fp8, ep, graph, grouped_gemm
# tests; layer and gemm benches). Carry [".dev/b141"] (~6-8 min, BOUND=${BOUND:-560}).
# Predicted: every test passes (the small test shapes now take the combine pass; the movers stay forced by the
# in_producer_dx_combine_movers_* tests). Then the 7B n=256 step once more under the default: the pass line ~1.00x
# (the default's own way), the movers' ~0.88x.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b141
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-560}
B=b141/main
t layer_forward 120 330
t layer_backward 120 230
t fp8 120 130
t graph 40 90
t ep 90 5
lb() { local tag=$1 sh=$2 want=$3 rest=$4
  env MEGAMOE_BENCH_SHAPE=$sh MEGAMOE_BENCH_HEAT=1 timeout $(to $want $rest) $B/layer --bench > $OUT/r/layer_$tag.txt 2>&1
  echo "== layer $tag ($sh) rc $? at $(el) s"
  grep -hE "^RESULT megamoe forward [0-9]|^RESULT megamoe forward\+backward \(z saved, bf16 weight gradients\)" \
    $OUT/r/layer_$tag.txt | cut -c1-240
  grep -hE "FAILED|panicked|Error" $OUT/r/layer_$tag.txt | head -3; }
lb 7b 1536,256,128,8,24576 60 90
# SonicMoE's top-16 shapes at H = 4096 (2.1e9 routed-row elements: inside the 2^32 limit since 48093de; its Figure
# 14 reads ~427 / ~459 TFLOP/s forward / backward at 30B n=256 and ~517 / ~526 at 120B n=512)
lb 30b_n256 4096,256,256,16,32768 90 0
lb 120b_n512 4096,512,256,16,32768 90 0
echo "total $(el) s"

#!/usr/bin/env bash
# Fifty-sixth session: main 63f0ed5's GPU tests with dx's combine by the rule by default (the pass below I = 512)
# and the movers' prefetch retired; b141 = that tree (layer_forward, layer_backward, fp8, ep, graph, grouped_gemm
# tests; layer and gemm benches). Carry [".dev/b141"] (~6-8 min, BOUND=${BOUND:-540}).
# Predicted: every test passes (the small test shapes now take the combine pass; the movers stay forced by the
# in_producer_dx_combine_movers_* tests). Then the 7B n=256 step once more under the default: the pass line ~1.00x
# (the default's own way), the movers' ~0.88x.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b141
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-540}
B=b141/main
t layer_forward 120 330
t layer_backward 120 230
t fp8 120 130
t graph 40 90
t ep 90 5
env MEGAMOE_BENCH_SHAPE=1536,256,128,8,24576 MEGAMOE_BENCH_HEAT=1 timeout $(to 90 0) $B/layer --bench \
  > $OUT/r/layer_7b.txt 2>&1
echo "== layer 7b rc $? at $(el) s"
grep -hE "^RESULT megamoe forward\+backward \(z saved, bf16 weight gradients\)" $OUT/r/layer_7b.txt | cut -c1-240
echo "total $(el) s"

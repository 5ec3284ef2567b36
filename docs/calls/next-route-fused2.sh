#!/usr/bin/env bash
# Prepared in the fortieth session after next-route-fused.sh (call 1: every test that finished passed, but in the
# layer's launch profile route_fused read 44-48 us, the forward's routing A/B 0.994x, the step's 1.006x): where the
# time goes. b74 = main 97486c4 (`BDIR=/work/main/.dev/b74 bash docs/calls/2026-12-04c-build.sh main
# layer_forward graph route`). Carry [".dev/b74"] (~7 min, bound 565 s).
# 1. the route test's per-launch timings (printed now), 2. the routing alone (layer bench MEGAMOE_BENCH_ONLY=routing:
# each launch timed alone, and 50 routings back to back between two events), 3. the 30B layer bench (its launch
# profile and the new line: 10 forwards back to back, routing forms alternating), 4. graph and layer_forward whole
# (call 1 cut them at 60 / 120 s; they take ~70 / ~205 s).
# Predicted: route_fused alone 8-14 us, back to back 6-12 us against the split form's 25-30; if the layer's 44 us
# was host latency (the GPU idle, waiting for the launch after the routing), the back-to-back forward gains
# 20-35 us (1.008-1.015x) while the per-rep forward does not.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b74
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b74/main
t route 60 480 route_timing --nocapture
grep -h "^routing of" $OUT/r/t_route.txt
MEGAMOE_BENCH_ONLY=routing timeout $(to 60 420) $B/layer --bench > $OUT/r/layer_routing.txt 2>&1
echo "== layer routing rc $? at $(el) s"
grep -h "^RESULT" $OUT/r/layer_routing.txt | cut -c1-300
MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout $(to 120 330) $B/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe routing\|^RESULT megamoe forward, 10\|^RESULT megamoe forward+backward (z saved)" $OUT/r/layer.txt | cut -c1-260
grep -h "PHASE.*z saved" $OUT/r/layer.txt | cut -c1-200 | head -4
grep -E "FAILED|panicked|Error" $OUT/r/layer.txt | head -4
t graph 100 240
t layer_forward 240 0
echo "total $(el) s"

#!/usr/bin/env bash
# Run in the fortieth session (docs/RESULTS.md 2026-12-06c call 1). Prepared then: `route_fused` (the routing layout in one launch, two grid barriers; the default)
# on the GPU, any card. b73 = main edb7c26 (`BDIR=/work/main/.dev/b73 bash docs/calls/2026-12-04c-build.sh main
# layer_forward layer_backward graph ep route`). Carry [".dev/b73"] (~5-7 min, bound 565 s).
# The tests first (route: both forms against the CPU model, the error word poisoned, one barrier word over 60 calls
# of 1..128 blocks; the layer, graph and EP tests run the fused routing by default), then route under memcheck,
# then the 30B layer bench with its launch-by-launch profile and the routing's alternating line.
# Predicted: every test passes; route_fused alone ~8-14 us against the split form's ~30 us at E = 128 (E = 4096:
# ~20-30 us against ~100); in the layer the forward 20-35 us shorter (the memset, two launches, their gaps and
# route_scan's 15 us), so the alternating line's forward 1.008-1.015x, the step 1.003-1.005x.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b73
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b73/main
t route 90 420
grep -h "^routing of" $OUT/r/t_route.txt
t layer_forward 120 330
t layer_backward 150 200
t graph 60 150
t ep 60 100
timeout $(to 60 90) compute-sanitizer --tool memcheck $B/route route_matches_model_on_random --include-ignored > $OUT/r/memcheck_route.txt 2>&1
echo "== memcheck route rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck_route.txt | tr '\n' ' ')"
MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout $(to 150 0) $B/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe routing\|^RESULT megamoe forward+backward (z saved" $OUT/r/layer.txt | cut -c1-260
grep -h "PHASE.*z saved.*route\|PHASES" $OUT/r/layer.txt | cut -c1-200 | head -8
grep -E "FAILED|panicked|Error" $OUT/r/layer.txt | head -4
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the fortieth session after next-pdl.sh (call 3: the layer's PDL test cut at 90 s; PDL on 0.990-0.994x;
# a lone forward 2440 us against 2380 back to back). b76 = main 5ac0103 (`BDIR=/work/main/.dev/b76
# bash docs/calls/2026-12-04c-build.sh main layer_backward`, gemm dropped). Carry [".dev/b76"] (~4.5 min, bound 290 s).
# 1. the layer's PDL test whole (3 configurations x 4 forward + 2 backwards, 30B T = 1024), 2. the 30B layer bench:
# the lone forward through `forward` (seven allocations) against `forward_into` (one Saved), host enqueue times.
# Predicted: the PDL test passes; the host enqueues a forward in 40-80 us, forward_into 10-30 us less, and the lone
# forward_into 0.5-1.5% shorter than forward's.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b76
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b76/main
BOUND=${BOUND:-290}
t layer_backward 200 70 programmatic
MEGAMOE_BENCH_ONLY=30B timeout $(to 80 0) $B/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward alone\|^RESULT megamoe forward, 10\|^RESULT megamoe programmatic" $OUT/r/layer.txt | cut -c1-320
grep -E "FAILED|panicked|Error" $OUT/r/layer.txt | head -4
echo "total $(el) s"

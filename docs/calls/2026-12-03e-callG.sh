#!/usr/bin/env bash
# Ran 2026-12-03 (tenth session) as call G on branch graph at its first commit (the Gpu still on the legacy
# default stream): graph 1/5 (begin_capture: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), layer_forward 30/30,
# ep 21/21, layer_backward 19/19. The CUDA-graph step (tests/graph.rs) and the layer / EP tests after
# forward -> alloc_saved + forward_into.
set -uo pipefail
cd "$(dirname "$0")/bG"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
for t in graph layer_forward ep layer_backward; do
  late 330 && { echo "== $t skipped for time"; continue; }
  t0=$(date +%s); timeout 200 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; rc=$?
  echo "== $t rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$t.txt | tail -1)"; grep -E "FAILED|panicked|refused as" $OUT/$t.txt | head -8
done
grep -E "rel err" $OUT/graph.txt | head -12
echo "total $(( $(date +%s) - start )) s"

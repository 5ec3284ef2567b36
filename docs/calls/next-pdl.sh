#!/usr/bin/env bash
# Prepared in the fortieth session: programmatic dependent launch (MEGAMOE_PDL=on: griddepcontrol at each chain
# kernel's entry, cuLaunchKernelEx with programmatic stream serialization, self-resetting tile counters, no memsets
# between the GEMMs), any card. b75 = main d0cbbef (`BDIR=/work/main/.dev/b75 bash
# docs/calls/2026-12-04c-build.sh main layer_forward layer_backward graph grouped_gemm route`). Carry [".dev/b75"]
# (~7-8 min, bound 565 s).
# 1. the run-time walks' tests (counter 0 after each launch; repeated launches with PDL and no memset), 2. the
# layer's PDL test (bitwise the plain launches, three rounds), 3. layer_forward and graph whole with MEGAMOE_PDL=on
# (every test with PDL: captures record programmatic edges), 4. the 30B layer bench (PDL's alternating lines, the
# forward 10 back to back with PDL on / off).
# Predicted: all pass; PDL on makes the forward 5-20 us shorter back to back (0.2-0.8%), the step 10-40 us.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b75
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b75/main
t grouped_gemm 90 470 dyn_sched
t layer_backward 90 400 programmatic
MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout $(to 100 300) $B/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe routing \|^RESULT megamoe programmatic\|^RESULT megamoe forward, 10\|^RESULT megamoe forward+backward (z saved)" $OUT/r/layer.txt | cut -c1-300
grep -E "FAILED|panicked|Error" $OUT/r/layer.txt | head -4
MEGAMOE_PDL=on t graph 90 210
MEGAMOE_PDL=on t layer_forward 210 0
echo "total $(el) s"

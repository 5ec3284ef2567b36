#!/usr/bin/env bash
# Prepared in the fortieth session (not run): where a lone forward's extra ~100 us comes from (docs/RESULTS.md
# 2026-12-06c call 4: 2519 us timed alone against 2396 a forward back to back, the host's enqueue only 23-28 us).
# b78 = main 166469a's layer bench (`BDIR=/work/main/.dev/b78 bash docs/calls/2026-12-04c-build.sh main layer_backward`,
# then only layer kept). Carry [".dev/b78"] (~2 min, bound 300 s), any card; on an H200 the done-when call
# (DW=b77 next-done-when.sh, b77 = the same main) prints the same lines.
# Predicted: if the GPU waits for the host or restarts from idle, the forward after 1 GiB of memset is within 1% of
# the back-to-back forward and 3-5% under the idle one; if not, the two lone forwards read alike and the cause is
# elsewhere (clocks: the smi samples beside the run).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b78
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b78/main
BOUND=${BOUND:-300}
smi_start
MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout $(to 150 0) $B/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
smi_stop
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward alone\|^RESULT megamoe forward, 10" $OUT/r/layer.txt | cut -c1-320
grep -h "PHASE.*z saved" $OUT/r/layer.txt | cut -c1-200 | head -4
grep -E "FAILED|panicked|Error" $OUT/r/layer.txt | head -4
echo "total $(el) s"

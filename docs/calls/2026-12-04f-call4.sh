#!/usr/bin/env bash
# Call 4 of 2026-12-04f: where the 30B layer's forward + backward goes now, launch by launch (device events around
# every launch, MEGAMOE_BENCH_PHASES=1), twice, with the landed main (.dev/b28/main/layer = 0e67e45's tree).
# Call 3 put fwd + bwd at 7681-7893 us (f32 weight gradients) / 7442-7539 (bf16) against PyTorch's 14955-14981:
# 1.90-1.95x / 1.98-2.01x; issue 4 asks >= 2x. Command `bash docs/calls/2026-12-04f-call4.sh`, carry [".dev/b28"].
. "$(dirname "$0")/prelude.sh" b28
for n in 1 2; do
  MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout 120 b28/main/layer --bench > $OUT/r/phases_$n.txt 2>&1
  echo "== phases $n rc $? at $(el) s"
  grep -E "^PHASES" $OUT/r/phases_$n.txt
done
echo "total $(el) s"

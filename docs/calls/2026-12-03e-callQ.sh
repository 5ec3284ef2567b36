#!/usr/bin/env bash
# Ran 2026-12-03 (tenth session) at ec6f508 (the bench binary cargo bench --bench ep --no-run, copied as bQ/ep_bench).
# ep_bench with the four forward modes alternating (pull/push dispatch x scatter/copy combine), twice.
set -uo pipefail
cd "$(dirname "$0")/bQ"
for round in 1 2; do
  timeout 150 ./ep_bench --bench > $OUT/ep_bench_$round.txt 2>&1; echo "== ep_bench round $round rc $?"
  grep -E "RESULT|every|FAILED" $OUT/ep_bench_$round.txt | cut -c1-330
done

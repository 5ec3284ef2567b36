#!/usr/bin/env bash
# Twenty-seventh session: next-energy-tests.sh and next-headline.sh in one call (a machine start saved), each into
# its own $OUT subfolder (a/r.tgz, b/r.tgz). The headline first (~3 min), then the knobs' tests (~3.5 min) under
# what is left of 570 s. Command `bash docs/calls/next-tests-headline.sh`, carry [".dev/b41", ".dev/b43"].
set -u
d="$(cd "$(dirname "$0")" && pwd)"; s=$(date +%s)
mkdir -p "$OUT/a" "$OUT/b"
OUT="$OUT/a" timeout 300 bash "$d/next-headline.sh"; echo "== headline rc $? at $(( $(date +%s) - s )) s"
left=$(( 570 - ($(date +%s) - s) )); [ $left -lt 30 ] && left=30
OUT="$OUT/b" timeout $left bash "$d/next-energy-tests.sh"; echo "== knobs' tests rc $? at $(( $(date +%s) - s )) s"

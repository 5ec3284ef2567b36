#!/usr/bin/env bash
# 2026-12-03 (eleventh session), call Z: after the routing step moved into MoeLayer::route_call and the FP8 forward
# took cached tensor maps: tests/fp8.rs (with the FP8 forward replayed as a CUDA graph), layer_forward and graph
# (Qwen-sized cases skipped for time) in parallel, then the FP8 bench at 30B.
set -uo pipefail
cd "$(dirname "$0")/bZ"
start=$(date +%s)
run() { local name=$1; shift; local t0=$(date +%s); "$@" --include-ignored --test-threads=1 > $OUT/$name.txt 2>&1; local rc=$?
  echo "== $name rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$name.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/$name.txt | head -8; }
run fp8 timeout 60 ./fp8 &
run layer_forward timeout 110 ./layer_forward --skip qwen3 &
run graph timeout 110 ./graph --skip qwen3 &
wait
[ $(( $(date +%s) - start )) -lt 120 ] && { MEGAMOE_BENCH_ONLY=30B timeout 45 ./fp8_bench --bench > $OUT/fp8_bench.txt 2>&1; echo "== fp8 bench rc $?"; grep -E "RESULT.*layer|FAIL" $OUT/fp8_bench.txt | cut -c1-250; }
echo "total $(( $(date +%s) - start )) s"

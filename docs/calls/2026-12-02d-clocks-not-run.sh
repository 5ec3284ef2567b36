#!/usr/bin/env bash
# clocks and power while the 30B layer bench runs (is the ncu-sum vs timed gap power throttling?)
cd "$(dirname "$0")/bundle"
nvidia-smi dmon -s pc -d 1 > $OUT/dmon.txt 2>&1 &
D=$!
nvidia-smi -q -d POWER,CLOCK,PERFORMANCE > $OUT/smi_before.txt 2>&1
MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer.txt 2>&1
nvidia-smi -q -d PERFORMANCE > $OUT/smi_after.txt 2>&1
kill $D
grep RESULT $OUT/layer.txt | cut -c1-120; cat $OUT/dmon.txt | head -60

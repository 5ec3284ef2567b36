#!/usr/bin/env bash
# The next session's first call (docs/NOTES.md, "Next session" 2): where the 30B fwd+bwd's ~1.06 ms beyond the
# sum of its kernels goes. From a bundle of main (`cargo xtask gpu-bundle .dev/bundle`; copy this to .dev/ and run
# `bash .dev/next-gap.sh` with carry [".dev"]). PHASE lines: every launch's time in place and the idle time
# before it (device events around each launch); dmon: SM clock and power during the bench.
cd "$(dirname "$0")/bundle"
nvidia-smi dmon -s pc -d 1 > $OUT/dmon.txt 2>&1 &
D=$!
MEGAMOE_BENCH_PHASES=1 MEGAMOE_BENCH_ONLY=30B timeout 80 ./layer --bench > $OUT/layer_phases.txt 2>&1; echo "rc $?"
kill $D
grep -E "^RESULT|^PHASES" $OUT/layer_phases.txt | cut -c1-170
grep "^PHASE " $OUT/layer_phases.txt | sort -t'p' -k1,1 | awk '{print}' | head -40
cat $OUT/dmon.txt | head -70
timeout 60 ./gpu_primitives --include-ignored --test-threads=1 > $OUT/t_prim.txt 2>&1; echo "gpu_primitives rc $?"
grep "test result" $OUT/t_prim.txt

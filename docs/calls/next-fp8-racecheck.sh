#!/usr/bin/env bash
# Forty-third session (any card): compute-sanitizer racecheck and synccheck on the FP8 producer gather's test (the
# row tokens shared between the producer's 128 threads and the consumers through two halves of shared memory).
# b96 = main bb219ad's fp8 test binary. Carry [".dev/b96"].
# Predicted: 0 hazards, 0 errors.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b96
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-200}
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
for tool in racecheck synccheck; do
  timeout $(to 90 10) "$cs" --tool $tool --error-exitcode 9 b96/main/fp8 --include-ignored --exact \
    fp8_x_gathered_in_the_producer_is_bitwise_the_pass --test-threads=1 > $OUT/r/$tool.txt 2>&1
  echo "== $tool rc $? at $(el) s"; grep -E "SUMMARY|test result|hazard" $OUT/r/$tool.txt | head -4
done
echo "total $(el) s"

#!/usr/bin/env bash
# Forty-fourth session (any card): the FP8 gather's racecheck reports against the bf16 gather's at the same shape.
# b102 = main's fp8 and layer_forward test binaries with two new tests: layer_forward `in_producer_fp8_test_dims`
# (the bf16 gathering layer at the FP8 test's dims: 133 tokens, H 1024, I 256, E 24, top-3: ~17 rows an expert,
# rings refilled) and fp8 `fp8_x_gathered_in_the_producer_whole_tiles` (the FP8 gather at 2048 tokens: ~256 rows an
# expert). Carry [".dev/b102"].
# Predicted (docs/NOTES.md 2026-12-06g, the zero-fill lead): the bf16 gather at the FP8 test's dims reported at its
# LDGSTS sites; the FP8 gather with whole tiles far fewer reports (or none).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b102
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b102/main
BOUND=${BOUND:-110}
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
for spec in "layer_forward in_producer_fp8_test_dims" "fp8 fp8_x_gathered_in_the_producer_whole_tiles"; do
  set -- $spec
  timeout $(to 30 5) $B/$1 --include-ignored --exact $2 --test-threads=1 > $OUT/r/t_$2.txt 2>&1
  echo "== $2 rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$2.txt)"
  timeout $(to 45 5) "$cs" --tool racecheck --error-exitcode 9 $B/$1 --include-ignored --exact $2 --test-threads=1 \
    > $OUT/r/racecheck_$2.txt 2>&1
  echo "== racecheck $2 rc $? at $(el) s"
  grep -E "RACECHECK SUMMARY" $OUT/r/racecheck_$2.txt | head -1
  grep -E "Race reported" $OUT/r/racecheck_$2.txt | sed -E 's/\+0x[0-9a-f]+//g' | sort | uniq -c | head -6
done
echo "total $(el) s"

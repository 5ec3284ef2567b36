#!/usr/bin/env bash
# 2026-12-04g (twenty-third session) call 5: main 5babb82..bc9e9cb (expert maps + clusters + k16 + the clusters test
# fix): the layer backward tests that calls A / A2 could not finish (the f64 reference on this machine ran ~25% slower
# than in the twenty-second session: 175 s per binary was too short), and the fixed clusters test.
# Binaries .dev/b31/land (cargo test --release --no-run of grouped_gemm and layer_backward at bc9e9cb).
# Command `bash docs/calls/2026-12-04g-call5.sh`, carry [".dev/b31"].
. "$(dirname "$0")/prelude.sh" b31
timeout 240 b31/land/layer_backward --include-ignored --test-threads=1 > $OUT/r/layer_backward.txt 2>&1
echo "== layer_backward rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/layer_backward.txt | cut -c1-300 | head -6
timeout 40 b31/land/grouped_gemm clusters --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm clusters rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"
grep -E "FAILED|panicked" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -6
echo "total $(el) s"

#!/usr/bin/env bash
# Call 1 of 2026-12-04f (prepared in the twenty-first session as next-wgrad-busiest-first-a.sh). Call A of docs/wip/wgrad-busiest-first.patch (landed after it): the GPU tests.
# The patch: the weight gradients' run-time schedule (a) over the experts busiest first (every thread of the block
# ranks one expert by its work into shared memory, up to 256 experts; the counter's index i is tile i % per of the
# expert ranked i / per), (b) with a helper review's fixes (the counter zeroed by the host before each launch, not
# reset by the last block, zero and launch enqueued under a per-device lock; the next index asked for, relaxed,
# once the current tile's loads are issued), (c) the
# same run-time schedule in the FP8 weight gradients (`grouped_wgrad_fp8*`: tile queue, counter, busiest first by K
# blocks). Tests: grouped_gemm (incl. 300 experts past the ranking, three accumulating launches against static),
# fp8 (every FP8 wgrad case now also runs three run-time launches against static bit for bit; skewed 240-tile
# cases; 300 experts), ep,
# graph, layer_backward: the first full GPU run of the run-time schedule (landed in 1092134 with grouped_gemm and
# six layer_backward cases only).
# Binaries (built in the twenty-first session; if gone: `git apply docs/wip/wgrad-busiest-first.patch`,
# BDIR=.dev/b27 bash docs/calls/2026-12-04c-build.sh lpt grouped_gemm layer_backward ep graph fp8, the fp8 bench
# into .dev/b27/lpt/fp8_bench.gz (cargo bench --bench fp8 --no-run; strip; gzip), `git checkout README.md benches
# host kernels-gpu tests`, then BDIR=.dev/b27 bash docs/calls/2026-12-04c-build.sh base and remove
# .dev/b27/base/layer.gz): .dev/b27/lpt = main 84a649f + the patch, .dev/b27/base = main cb537e5 (gemm; the same
# kernels as 84a649f). Command `bash docs/calls/next-wgrad-busiest-first-a.sh`, carry [".dev/b27"] (~7 min).
. "$(dirname "$0")/prelude.sh" b27
for t in grouped_gemm fp8 ep graph layer_backward; do
  timeout 175 b27/lpt/$t --include-ignored --test-threads=1 > $OUT/r/$t.txt 2>&1
  echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/r/$t.txt)"
  grep -E "FAILED|panicked" $OUT/r/$t.txt | cut -c1-300 | head -6
done
echo "total $(el) s"

#!/usr/bin/env bash
# Thirtieth session: the five prepared patches in one binary, so their tests cost one call instead of five.
# Branch combo = main e5f95b0 + energy-both (git apply) + uniform-desc + fp8-guards + ep-route-error +
# tensormap-fences (git am -3; the README hunks merged by git's 3-way). Binaries .dev/b49/combo
# (`BDIR=.dev/b49 bash docs/calls/2026-12-04c-build.sh combo grouped_gemm layer_forward layer_backward graph fp8 ep`
# in the combo worktree). This call: the suites that test the kernels every patch touches (layer_backward whole with
# the knobs' both_knobs_* / skip_idle_* / a_maps_*, grouped_gemm whole (73), fp8 whole (52, the guards' four
# bad-offset tests), ep whole (27, the two bad-expert-id tests) and memcheck of one of those); graph whole last; layer_forward
# runs in the soak call (next-combo-soak.sh). Predicted: every test passes (each patch's tests passed on the
# CPU; none has run on a GPU). A failure's test name says which patch to look at first.
# Command `bash docs/calls/next-combo-tests.sh`, carry [".dev/b49"]; expected ~8.5 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b49
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b49/combo
t layer_backward 170 365 --nocapture
echo "layer_backward both-knobs configurations bitwise equal: $(grep -c 'both knobs on bitwise both off' $OUT/r/t_layer_backward.txt)"
t grouped_gemm 130 235
t fp8 60 175
grep -hE "bad_offsets" $OUT/r/t_*.txt | cut -c1-160
t ep 35 140
timeout $(to 60 80) compute-sanitizer --tool memcheck --error-exitcode 3 $B/ep ep2_bad_expert_id_pull_scatter \
  --include-ignored --test-threads=1 > $OUT/r/memcheck.txt 2>&1
echo "== memcheck rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck.txt | tr '\n' ' ')"
t graph 80 0
echo "total $(el) s"

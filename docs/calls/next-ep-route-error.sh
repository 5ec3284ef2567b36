#!/usr/bin/env bash
# Prepared in the twenty-ninth session (not run; branch ep-route-error = docs/wip/ep-route-error.patch, one commit,
# CPU-checked: check-kernels clean, ep_dispatch / ep_combine without spills). A helper's audit found that on main an
# expert id outside -1..E on one EP rank silently corrupts the other ranks' results: route_scan still writes that
# rank's counts while its offsets are zeroed and route_place does not run, ep_dispatch all-gathers those counts, so
# every owner lays out rows that never come; ep_combine then returns those stale rows to the (rank, slot) their stale
# recv_meta names (racing with the right writer), and the owners' weight gradients take the stale rows in. The fix:
# such a rank sends zero counts (it pushes no row anyway) and its combine writes none of its outputs; the other ranks'
# results are then those of a call without its tokens, and check() says so.
# The call: tests/ep.rs's new ep4_bad_expert_id_on_one_rank (push, MEDIUM, R = 4) and ep2_bad_expert_id_pull_scatter
# (pull + scatter, SMALL, R = 2): the bad rank's out, dx and dtopk keep their poison, check() names it, every other
# result (other ranks' out, dx, dtopk; every rank's dW1, dW2) bitwise the EP = 1 layer with that rank's slots masked,
# then a normal call on the same layer; then compute-sanitizer memcheck on the small one; then tests/ep.rs whole (the
# EpRank parameter block grew by 8 bytes a rank: every EP test, both launch forms).
# Predicted: all pass, memcheck 0 errors. If they pass: `git am docs/wip/ep-route-error.patch`, and drop the README
# Limits line on it. (ep-multi-gpu.patch touches EpRank's users too: regenerate whichever lands second.)
# Command `bash docs/calls/next-ep-route-error.sh`, carry [".dev/b46"]; expected ~4 min (bound 560 s).
. "$(dirname "$0")/prelude.sh" b46
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b46/re
timeout 120 $B/ep bad_expert_id --include-ignored --test-threads=1 --nocapture > $OUT/r/t_bad_id.txt 2>&1
echo "== ep bad_expert_id rc $? at $(el) s: $(grep 'test result' $OUT/r/t_bad_id.txt)"
grep -E "FAILED|panicked|seed" $OUT/r/t_bad_id.txt | cut -c1-300 | head -8
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $B/ep ep2_bad_expert_id_pull_scatter --include-ignored \
  --test-threads=1 > $OUT/r/memcheck.txt 2>&1
echo "== memcheck rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck.txt | tr '\n' ' ')"
timeout $(( 550 - $(el) )) $B/ep --include-ignored --test-threads=1 > $OUT/r/t_ep.txt 2>&1
echo "== ep whole rc $? at $(el) s: $(grep 'test result' $OUT/r/t_ep.txt)"
grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_ep.txt | cut -c1-300 | head -8
echo "total $(el) s"

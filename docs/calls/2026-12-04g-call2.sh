#!/usr/bin/env bash
# Prepared in the twenty-second session as next-*.sh; run unchanged as 2026-12-04g call 2 (twenty-third session, docs/RESULTS.md). Call A2: the GPU tests of the two patches stacked on
# docs/wip/wgrad-expert-maps.patch (call A): docs/wip/wgrad-clusters.patch (the weight gradients in 2-CTA clusters
# sharing B, opt-in MEGAMOE_WGRAD_SCHED=clusters; tests: bit for bit the static schedule, 300 experts, which kernel
# runs, the layer's _mc / _mv_mc against the default) and docs/wip/wgrad-skip-empty-k16.patch (the k16 steps of an
# expert's last k-tile holding none of its rows not issued: one k-step helper per count, no wgmma under a branch;
# every weight-gradient test covers partial k-tiles). Binaries: .dev/b29/mc = main 8c8f692 + maps + clusters,
# .dev/b29/k16 = the same + k16 (rebuild: `git am` the patches in that order, BDIR=.dev/b29 bash
# docs/calls/2026-12-04c-build.sh mc grouped_gemm layer_backward; then k16 likewise). Command
# `bash docs/calls/2026-12-04g-call2.sh`, carry [".dev/b29"] (~5 min).
. "$(dirname "$0")/prelude.sh" b29
for v in mc/grouped_gemm "mc/layer_backward clustered" k16/grouped_gemm k16/layer_backward; do
  b=${v%% *}; filt=${v#"$b"}; t=${b/\//_}
  timeout 175 b29/$b $filt --include-ignored --test-threads=1 > $OUT/r/$t.txt 2>&1
  echo "== $v rc $? at $(el) s: $(grep 'test result' $OUT/r/$t.txt)"
  grep -E "FAILED|panicked" $OUT/r/$t.txt | cut -c1-300 | head -6
done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the fortieth session (not run): route_fused as a cooperative launch (docs/wip/route-cooperative.patch,
# the review's co-residency risk: the driver, not the occupancy product, decides whether the grid can be resident,
# and the three launches run where it cannot). b79 = branch route-coop 1f8403d = main + the patch (`git worktree add
# /tmp/coop -b route-coop main && cd /tmp/coop && git am -3 /work/main/docs/wip/route-cooperative.patch && ln -s
# /work/main/.tools .tools && BDIR=/work/main/.dev/b79 bash docs/calls/2026-12-04c-build.sh main route graph
# layer_forward`). Carry [".dev/b79"] (~5 min, bound 400 s), any card.
# Predicted: every test passes (route: the fused form launched cooperatively in every compare; graph: captures hold
# the cooperative kernel node and replay bitwise); the routing's time unchanged (12-14 us alone at 30B).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b79
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b79/main
BOUND=${BOUND:-400}
t route 60 340 --nocapture
grep -h "^routing of" $OUT/r/t_route.txt
t graph 100 240
t layer_forward 230 0
echo "total $(el) s"

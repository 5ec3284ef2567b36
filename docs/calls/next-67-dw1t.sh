#!/usr/bin/env bash
# Fifty-ninth session: dW1 computed transposed (docs/wip/wgrad-gather-dw1t.md / .patch, branch dw1t 75c547d: x's rows
# the gathered A, dz the pair-shared B, the tile stored transposed through a 3-D map; `MEGAMOE_WGRAD_GATHER=3`,
# opt-in). b149 = the branch's layer_backward test binary and libmegamoe_capi.so (rebuild: in a worktree with the
# patch applied, `BDIR=$PWD/.dev/b149 bash docs/calls/2026-12-04c-build.sh dw1t layer_backward`, then the capi as
# next-67-tests.sh's head says, into .dev/b149/capi). Carry [".dev/b149"], timeout ~300. Chain after
# next-67-tests.sh on the warm machine.
# Predicted: `wgrad_gather_xt*` pass bitwise (the copies' and `_gb`'s backward; if only dW1 differs, the tensor
# cores' sum is not symmetric in its operands: the design's fallback); at 30B n=256 dW1 4498 -> 3.5-4.3 ms, the step
# 1.01-1.04x mode 3 against mode 2; 7B n=256 likewise.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b149
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-290}
B=b149/dw1t
t layer_backward 120 160 wgrad_gather_x
export MEGAMOE_LIB=$PWD/b149/capi/libmegamoe_capi.so
for round in 1 2; do
  for m in 2 3; do trace_key sfg-30b-256 g${m}_$round MEGAMOE_WGRAD_GATHER=$m; done
done
for m in 2 3; do trace_key sfg-7b-256 g$m MEGAMOE_WGRAD_GATHER=$m; done
echo "total $(el) s"

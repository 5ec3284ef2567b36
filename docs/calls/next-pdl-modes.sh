#!/usr/bin/env bash
# Prepared in the fortieth session (not run): programmatic dependent launch's trigger, three ways
# (docs/wip/pdl-trigger-modes.patch: MEGAMOE_PDL_TRIGGER=entry, the trigger right after each kernel's wait, as main's
# PDL; exit, no trigger: the next grid is scheduled only as this one's blocks leave; last-tile, at each block's last
# run-time take), after main's PDL measured 0.6-1% slower (docs/RESULTS.md 2026-12-06c calls 3-4). b81 = branch
# pdl-modes 1f9b854 = main + the patch (`git worktree add /tmp/pdlm -b pdl-modes main && cd /tmp/pdlm && git am -3
# /work/main/docs/wip/pdl-trigger-modes.patch && ln -s /work/main/.tools .tools && BDIR=/work/main/.dev/b81 bash
# docs/calls/2026-12-04c-build.sh main layer_backward`, gemm dropped; then `cargo build --release -p megamoe-capi`
# and its libmegamoe_capi.so stripped and gzipped into .dev/b81/capi). Carry [".dev/b81"] (~7 min, bound 500 s).
# 1. the layer's PDL test with last-tile (bitwise the plain launches), 2. the forward's kernels on the GPU's clock
# per mode (benches/trace_forward.py), 3. the 30B layer bench's PDL lines per mode.
# Predicted: the test passes; if the early trigger is what costs, exit and last-tile read 1.000-1.005x against PDL
# off where entry reads 0.990-0.994x.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b81
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b81/main
BOUND=${BOUND:-500}
MEGAMOE_PDL_TRIGGER=last-tile t layer_backward 120 380 programmatic
export MEGAMOE_LIB=$PWD/b81/capi/libmegamoe_capi.so
for m in entry exit last-tile; do
  MEGAMOE_PDL=on MEGAMOE_PDL_TRIGGER=$m PYTHONUNBUFFERED=1 timeout $(to 60 300) python3 ../benches/trace_forward.py > $OUT/r/trace_$m.txt 2>&1
  echo "== trace PDL $m rc $? at $(el) s"
  grep -h "^RESULT trace .*forward\|Error\|Traceback" $OUT/r/trace_$m.txt | cut -c1-200 | head -4
done
for m in entry exit last-tile; do
  MEGAMOE_PDL_TRIGGER=$m MEGAMOE_BENCH_ONLY=30B timeout $(to 80 0) $B/layer --bench > $OUT/r/layer_$m.txt 2>&1
  echo "== layer 30B, trigger $m rc $? at $(el) s"
  grep -h "^RESULT megamoe programmatic\|^RESULT megamoe forward, 10" $OUT/r/layer_$m.txt | cut -c1-300
done
echo "total $(el) s"

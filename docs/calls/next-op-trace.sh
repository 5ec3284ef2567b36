#!/usr/bin/env bash
# Prepared in the fifty-second session: the custom operators' step on the GPU's clock (benches/trace_step.py 30B
# op-z / op, new modes) beside the autograd Function keeping z (z), two rounds. Carry [".dev/b131"] (main's
# libmegamoe_capi.so). ~2 min.
# Question: why the z-keeping operators run 0.5-5% behind the Function keeping z (2026-12-07e calls 2, 4, 12).
# Predicted: the same kernels (the routing again: +1 launch, ~15 us) and the kernels' sum within 1%; the gap in the
# span's idle time (host synchronisations of a cudaMalloc for z, or tensor maps placed for a new z address).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b131}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-280}
export MEGAMOE_LIB=$PWD/$BDIR/capi/libmegamoe_capi.so
for round in 1 2; do
  for mode in z op-z op; do
    f=$OUT/r/trace_30B_${mode}_$round.txt
    PYTHONUNBUFFERED=1 timeout $(to 40 10) python3 ../benches/trace_step.py 30B $mode > $f 2>&1
    echo "== trace 30B $mode round $round rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-90)"
    grep -h "FAILED\|Traceback\|Error" $f | head -3
    [ $round = 1 ] && grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -12 | cut -c1-100
  done
done
echo "total $(el) s"

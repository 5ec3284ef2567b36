#!/usr/bin/env bash
# Forty-second session: two fixes the step traces of other modes found (next-trace-modes.sh, an H100): `gather_rows`
# took one row a block, so the FP8 forward's gather of its scale rows (64 bytes at 30B) ran 131072 blocks in 81 us,
# twice a step; and the FP8 backward gathered dy by a pass (328 us) before a non-gathering dh (813) where the bf16
# backward's gathering dh takes ~1010. b89 = main a617e4a (the gather's whole short rows, the FP8 backward's
# dy in the producer): tests fp8 (incl. the FP8 backward bitwise with dy by the pass), layer_forward (the gather
# pass in every Gather::Pass case), graph; then trace_step.py modes fp8 and recompute through b88 and b89.
# Build: `BDIR=/work/main/.dev/b89 bash docs/calls/2026-12-04c-build.sh main fp8 layer_forward graph`, the capi as
# next-trace-step.sh's header with b89. Carry [".dev/b88", ".dev/b89"] (~6 min, any card).
# Predicted (H100): the scale gathers 81 -> 5-10 us each; the FP8 step at 30B 7184 -> ~6900 us (dy: -130 us, the
# scales -140), the FP8 forward's span -4%; recompute mode level (its gathers are of whole bf16 rows).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b89
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
for f in b88/*/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
BOUND=${BOUND:-560}
B=b89/main
if [ "${TESTS:-1}" = 1 ]; then
  t fp8 100 330
  t layer_forward 160 170
  t graph 100 120
fi
for lib in b88 b89; do
  for mode in fp8 recompute; do
    for shape in 30B 235B; do
      MEGAMOE_LIB=$PWD/$lib/capi/libmegamoe_capi.so PYTHONUNBUFFERED=1 timeout $(to 40 5) python3 \
        ../benches/trace_step.py $shape $mode > $OUT/r/trace_step_${lib}_${mode}_$shape.txt 2>&1
      echo "== trace_step $lib $mode $shape rc $? at $(el) s"
      grep -h "^RESULT trace-step .*: span\|kernel.*gather_rows\|kernel.*dswiglu\|FAILED\|Error\|Traceback" \
        $OUT/r/trace_step_${lib}_${mode}_$shape.txt | sed -E 's/RESULT trace-step (kernel )?Qwen3-[0-9A-Z-]+ //; s/ a step \(.*//' | cut -c1-120
    done
  done
done
echo "total $(el) s"

#!/usr/bin/env bash
# Forty-third session, first call (any card; an H200 gives the README's FP8 figures). b92 = main bb3ff43: the layer
# bench and the release libmegamoe_capi.so (`BDIR=/work/main/.dev/b92 bash docs/calls/2026-12-04c-build.sh main fp8`,
# then the capi build as next-trace-step.sh's header says). Carry [".dev/b92"].
# 1. The layer bench, both shapes: its FP8 lines (the forward, the FP8 steps per Fp8Backward mode with z recomputed,
#    and the new "forward+backward FP8, z saved" line: the FP8 step a Save::WithZ layer runs, alternating with the
#    bf16 z-saved step) are the first since the forty-second session's four FP8 changes.
# 2. trace_step.py fp8 at both shapes: the FP8 step's kernels on the GPU's clock (the H100 breakdown of 2026-12-06e
#    on this card).
# Another build: BIN=bNN (b95 = main after the FP8 producer gather and the layer bench's third layer freed before
# the FP8 lines, built the same way; run in the forty-third session's fourth call).
# Predicted (H200): the z-saved FP8 step 0.85-0.90x the bf16 z-saved step's time at 30B (the H100 traces: 5.80 /
#    6.63 = 0.875), 0.80-0.86x at 235B (21.2 / 25.4 on the H100); the FP8 forward ~0.75-0.8x the bf16 forward.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BIN=${BIN:-b92}
. "$(dirname "$0")/prelude.sh" $BIN
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-560}
B=$BIN/main
timeout $(to 400 100) $B/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer (both shapes) rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward+backward (z saved\|FP8\|FAILED\|panicked" $OUT/r/layer.txt | cut -c1-330
export MEGAMOE_LIB=$PWD/$BIN/capi/libmegamoe_capi.so
for shape in 30B 235B; do
  PYTHONUNBUFFERED=1 timeout $(to 60 5) python3 ../benches/trace_step.py $shape fp8 > $OUT/r/trace_step_fp8_$shape.txt 2>&1
  echo "== trace_step fp8 $shape rc $? at $(el) s"
  grep -h "^RESULT trace-step\|^check\|FAILED\|Error\|Traceback" $OUT/r/trace_step_fp8_$shape.txt \
    | sed -E 's/RESULT trace-step (kernel )?Qwen3-[0-9A-Z-]+ //; s/ a step \(.*//' | cut -c1-110
done
echo "total $(el) s"

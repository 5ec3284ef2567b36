#!/usr/bin/env bash
# Forty-second session: the FP8 forward stores z when the layer saves it (`grouped_gemm_fp8w_swiglu_qz`) and
# backward_fp8 reads it instead of recomputing (quantize x, gather codes and scales, the z GEMM: ~990 us of the 30B
# FP8 step on an H100, next-fp8-gather.sh). b90 = main 2212d1f: tests/fp8.rs whole (outputs and gradients bitwise
# across save modes for Straight, Dx and DxWgrad); trace_step.py mode fp8 through b89 (before) and b90.
# Build: `BDIR=/work/main/.dev/b90 bash docs/calls/2026-12-04c-build.sh main fp8` (gemm and layer removed), the capi
# as next-trace-step.sh's header with b90. Carry [".dev/b89", ".dev/b90"] (~2.5 min, any card).
# Predicted (H100): the FP8 step 6916 -> ~6050 us at 30B (the forward +~130 us for z's 403 MB, the backward
# -~990), 24573 -> ~21000 at 235B; every fp8 test passes.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b90
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
for f in b89/capi/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
BOUND=${BOUND:-250}
B=b90/main
t fp8 100 120
for lib in b89 b90; do
  for shape in 30B 235B; do
    MEGAMOE_LIB=$PWD/$lib/capi/libmegamoe_capi.so PYTHONUNBUFFERED=1 timeout $(to 40 5) python3 \
      ../benches/trace_step.py $shape fp8 > $OUT/r/trace_step_${lib}_fp8_$shape.txt 2>&1
    echo "== trace_step $lib fp8 $shape rc $? at $(el) s"
    grep -h "^RESULT trace-step .*: span\|^check\|kernel.*fp8w\|FAILED\|Error\|Traceback" \
      $OUT/r/trace_step_${lib}_fp8_$shape.txt | sed -E 's/RESULT trace-step (kernel )?Qwen3-[0-9A-Z-]+ //; s/ a step \(.*//' | cut -c1-120
  done
done
echo "total $(el) s"

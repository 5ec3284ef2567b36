#!/usr/bin/env bash
# Forty-second session: the FP8 dx copies x's rows for dW1 in its idle producer warps (`grouped_gemm_fp8w_cpx`), so
# the FP8 backward (FP8 dx, bf16 weight gradients) runs no x gather pass (334 us of the 30B FP8 step on an H100,
# next-fp8-z.sh). b91 = main 150a0ee: tests/fp8.rs whole (the Dx mode's bf16 dW1 bitwise the straight backward's,
# whose x rows come from the pass); trace_step.py mode fp8 through b90 (before) and b91.
# Build: `BDIR=/work/main/.dev/b91 bash docs/calls/2026-12-04c-build.sh main fp8` (gemm and layer removed), the capi
# as next-trace-step.sh's header with b91. Carry [".dev/b90", ".dev/b91"] (~2 min, any card).
# Predicted (H100): the FP8 step 6019 -> ~5750 us at 30B (the pass's 334 out, dx +30..90), 21903 -> ~21300 at 235B.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b91
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
for f in b90/capi/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
BOUND=${BOUND:-200}
B=b91/main
t fp8 90 80
for lib in b90 b91; do
  for shape in 30B 235B; do
    MEGAMOE_LIB=$PWD/$lib/capi/libmegamoe_capi.so PYTHONUNBUFFERED=1 timeout $(to 30 3) python3 \
      ../benches/trace_step.py $shape fp8 > $OUT/r/trace_step_${lib}_fp8_$shape.txt 2>&1
    echo "== trace_step $lib fp8 $shape rc $? at $(el) s"
    grep -h "^RESULT trace-step .*: span\|kernel.*fp8w\|kernel.*gather_rows\|FAILED\|Error\|Traceback" \
      $OUT/r/trace_step_${lib}_fp8_$shape.txt | sed -E 's/RESULT trace-step (kernel )?Qwen3-[0-9A-Z-]+ //; s/ a step \(.*//' | cut -c1-120
  done
done
echo "total $(el) s"

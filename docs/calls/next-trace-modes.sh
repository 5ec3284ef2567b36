#!/usr/bin/env bash
# Forty-second session: the step's kernels on the GPU's clock in the layer's other modes (benches/trace_step.py
# MODE: z recomputed, f32 weight gradients, the FP8 forward with its straight-through backward), at 30B and 235B,
# through b88's library (main with `_cpx_dyn`), looking for what the default mode's trace found in dx: a kernel far
# slower than its peers of the same FLOPs (a static walk at 235B, an unhidden copy). Carry [".dev/b88"] (~2 min, any
# card; an H100 shows the static walk's L2 thrash at 235B, an H200 hides it).
# Predicted: recompute mode adds the recompute (~GEMM1's time) and the x gather pass (~240 us at 30B); f32 weight
# gradients ~1.15x the bf16 ones; at 235B on an H100 the FP8 M-grouped GEMMs (static walk: no run-time counter)
# slower per FLOP than at 30B.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b88
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
export MEGAMOE_LIB=$PWD/b88/capi/libmegamoe_capi.so
for mode in recompute f32 fp8; do
  for shape in 30B 235B; do
    PYTHONUNBUFFERED=1 timeout $(to 60 5) python3 ../benches/trace_step.py $shape $mode \
      > $OUT/r/trace_step_${mode}_$shape.txt 2>&1
    echo "== trace_step $mode $shape rc $? at $(el) s"
    grep -h "^RESULT trace-step\|^check\|FAILED\|Error\|Traceback" $OUT/r/trace_step_${mode}_$shape.txt \
      | sed -E 's/RESULT trace-step (kernel )?Qwen3-[0-9A-Z-]+ //; s/ a step \(.*//' | cut -c1-110
  done
done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the fifty-second session: the FP8 step against the bf16 step at Qwen3-Next's fine-grained shape and
# at 30B, on the GPU's clock (benches/trace_step.py KEY z / fp8: z saved, bf16 weight gradients; the FP8 forward on
# weights quantized once, then its straight-through backward with the FP8 dx), two rounds. Any card; carry
# [".dev/b127"] (main's libmegamoe_capi.so). ~2 min.
# Why: at fine-grained experts the M-grouped GEMMs stream their weights at ~2.4 TB/s (2026-12-07e call 8), so FP8
# weights (half the bytes) should gain more there than at 30B.
# Predicted: the FP8 step 1.10-1.15x the bf16 step at 30B (2026-12-06f: 1.11x), 1.15-1.25x at next.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b127}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
export MEGAMOE_LIB=$PWD/$BDIR/capi/libmegamoe_capi.so
for round in 1 2; do
  for key in next 30B; do
    for mode in z fp8; do
      f=$OUT/r/trace_${key}_${mode}_$round.txt
      PYTHONUNBUFFERED=1 timeout $(to 40 10) python3 ../benches/trace_step.py $key $mode > $f 2>&1
      echo "== trace $key $mode round $round rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-50)"
      [ $round = 1 ] && grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -8 | cut -c1-100
    done
  done
done
echo "total $(el) s"

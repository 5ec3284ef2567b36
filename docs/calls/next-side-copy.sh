#!/usr/bin/env bash
# Prepared in the fifty-third session: (1) the side copy's policy (`MEGAMOE_SIDE_COPY=on|off|auto`,
# `gemm::with_side_copy`): tests that the gather pass instead of dx's side copy gives the same bits (layer_forward
# `in_producer_side_copy_*`, fp8 `backward_fp8_side_copy_off_is_bitwise_on`); (2) the Python test whole (the
# z-keeping operators now leave z's gradient unmaterialised: `ctx.set_materialize_grads(False)`); (3) the step
# with the side copy on and off at shapes from I = 256 to 768 (trace_step.py KEY op-z, two rounds alternating),
# and the FP8 step (KEY fp8) at two of them. Any card; carry [".dev/b132"] (b132: main's capi library and the
# layer_forward / fp8 test binaries with this change). ~8-9 min (BOUND=570).
# Question: the trace of 2026-12-07f call 1 has dx with the side copy at 157-228 TFLOP/s at I = 256 (SonicMoE's
# Figure 14 shapes) against 552 at 30B: its movers copy x row by row (1/I of dx's FLOPs in bytes), so at small I
# the copy sets dx's pace. Predicted: off (gather pass + plain dx) faster at I = 256 by 500-800 us a step (1.4B
# n=256: dx 1637 -> ~550 plus a ~320 us pass), ~100-250 us at I = 512, slower at 30B by ~100 us (the pass's
# 332 us against the copy's ~234 us extra); the fill kernel of z's gradient (~122 us at 30B) gone from op-z.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b132}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-570}
B=$BDIR/main
t layer_forward 60 480 in_producer_side_copy
t fp8 40 440 backward_fp8_side_copy
export MEGAMOE_LIB=$PWD/$BDIR/capi/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 200 230) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test rc $? at $(el) s: $(tail -1 $OUT/r/torch_binding.txt | cut -c1-200)"
grep -h "FAIL\|Traceback\|Error" $OUT/r/torch_binding.txt | head -5
tr1() { # KEY MODE SIDE ROUND
  local f=$OUT/r/trace_$1_$2_$3_$4.txt
  MEGAMOE_SIDE_COPY=$3 PYTHONUNBUFFERED=1 timeout $(to 40 5) python3 ../benches/trace_step.py $1 $2 > $f 2>&1
  echo "== $1 $2 side $3 r$4 rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-60)"
  grep -h "FAILED\|Traceback\|Error" $f | head -2
  grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | grep -E "bt_bf16|fp8w|gather_rows|elementwise" | cut -c1-100
}
for key in ${KEYS:-sfg-1b-256 sfg-7b-256 next sfg-30b-512 30B dsv2lite}; do
  for round in 1 2; do for side in on off; do tr1 $key op-z $side $round; done; done
done
for key in sfg-7b-256 30B; do for side in on off; do tr1 $key fp8 $side 1; done; done
echo "total $(el) s"

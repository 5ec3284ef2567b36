#!/usr/bin/env bash
# Forty-second session: dx's side copy with the run-time tile walk (`grouped_gemm_bt_bf16_cpx_dyn`). The step trace
# (next-trace-step.sh, an H100) found the layer's z-saved dx, the static-walk `_cpx` kernel, at 1488 us against GEMM1
# + SwiGLU's 1282 at 30B and 9165 against 5172 at 235B: the static walk's L2 thrash of 2026-12-05g (dx 0.68 of
# cuBLAS at 235B on an H100), which the side copy had brought back. b88 = main (this commit's parent: the new
# kernel, the default under the run-time walk): layer_forward (the in-producer tests: the side copy against the
# gather pass, bitwise, both walks), layer_backward and graph whole; then benches/trace_step.py through b87's
# library (main ecddda2, the static `_cpx`) and b88's, alternating, at 30B and 235B.
# Build: `BDIR=/work/main/.dev/b88 bash docs/calls/2026-12-04c-build.sh main layer_forward layer_backward graph`,
# the capi as next-trace-step.sh's header with b88. `TESTS=0`: the traces only. Carry [".dev/b87", ".dev/b88"] (~7 min, any card).
# Predicted (H100): 235B dx 9165 -> 5500-6200 us, the step 29.0 -> 25.5-26.3 ms; 30B dx 1488 -> 1380-1490 us (level
# to -7%); every test passes. On an H200 (2026-12-05g: the static walk level there) 235B -0..-10%, 30B level.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b88
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
for f in b87/*/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
BOUND=${BOUND:-560}
B=b88/main
if [ "${TESTS:-1}" = 1 ]; then
  t layer_forward 120 300 in_producer
  t layer_backward 150 200
  t graph 130 150
fi
for rep in 1 2; do
  for lib in b87 b88; do
    for shape in 30B 235B; do
      MEGAMOE_LIB=$PWD/$lib/capi/libmegamoe_capi.so PYTHONUNBUFFERED=1 timeout $(to 60 5) python3 \
        ../benches/trace_step.py $shape > $OUT/r/trace_step_${lib}_${shape}_$rep.txt 2>&1
      echo "== trace_step $lib $shape rep $rep rc $? at $(el) s"
      grep -h "^RESULT trace-step .*: span\|kernel.*bt_bf16_cpx\|FAILED\|Error\|Traceback" \
        $OUT/r/trace_step_${lib}_${shape}_$rep.txt | cut -c1-200
    done
  done
done
echo "total $(el) s"

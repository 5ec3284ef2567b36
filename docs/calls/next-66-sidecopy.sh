#!/usr/bin/env bash
# Fifty-eighth session: the Python test once more (MoE's new default: modules of one configuration share a layer on
# the eager path, a layer each with op=True or a ring; case_shared checks it), then dx's side copy against the gather
# pass at SonicMoE's top-16 shape 30B n=256 (H = 4096, I = 256, E = 256, k = 16, T = 32768; the rule
# `side_copy_pays` takes the side copy there: H >= 4096), the step traced back to back (trace_step.py KEY z, the
# kernels on the GPU's clock), default and MEGAMOE_SIDE_COPY=off alternating twice. Carry [".dev/b142"] (main's
# libmegamoe_capi.so: next-64-any.sh's head rebuilds it). ~2.5 min.
# Predicted: "all passed". The side copy's dx at this shape ran 7253 us (2026-12-07k trace: 2.2 TFLOP, ~3.7 ms at
# 600 TFLOP/s, plus 4.3 GB of dx rows and 4.3 GB of x rows written): the copy's 524288 rows of 8 KiB a row at a time
# (~4.3 ms at 30B n=512, hidden there under a 4.4 TFLOP dx) are not hidden under half the math. Off: the gather pass
# (4.3 GB each way at ~3.2 TB/s, ~2.7 ms) and the plain dx (~3.7-4.2 ms): the step ~0.3-0.8 ms shorter (1.01-1.03x).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b142
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-240}
export MEGAMOE_LIB=$PWD/b142/capi/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 90 100) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test rc $? at $(el) s: $(tail -1 $OUT/r/torch_binding.txt | cut -c1-120)"
grep -E "FAIL|default with|Traceback|Error" $OUT/r/torch_binding.txt | head -8 | cut -c1-200
for round in 1 2; do
  for sc in auto off; do
    f=$OUT/r/trace_sfg-30b-256_sc-${sc}_$round.txt
    MEGAMOE_SIDE_COPY=$sc PYTHONUNBUFFERED=1 timeout $(to 40 5) python3 ../benches/trace_step.py sfg-30b-256 z > $f 2>&1
    echo "== side copy $sc round $round rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-90)"
    grep -h "Traceback\|Error" $f | head -3
    grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -8 | cut -c1-90
  done
done
echo "total $(el) s"

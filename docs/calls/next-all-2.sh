#!/usr/bin/env bash
# Prepared in the twenty-fourth session (not run). Call 2 of 2 of next-all-1.sh's binary (branch next-all: the
# run-time cluster pairs, the weight gradients' consumer lead, the M-grouped consumer lead): the 30B layer bench,
# forward and forward + backward, in rotation over the knobs; run it right after call 1 (the machine warm), and
# only if call 1's tests passed. Edit the list to the leads call 1 found best before running if they differ.
# Predicted (against W 0 G 0 in the same call): the forward -20..-40 us (GEMM2 with the M-grouped lead), forward
# + backward -120..-270 us (GEMM2 and dx -60..-120, the f32 weight gradients -60..-150); the clusters' run-time
# pairs a further 0..-60 us; the cooperative SwiGLU with lead t2 level with `_ew7` in the forward.
# Binaries .dev/b36/all (as next-all-1.sh). Command `bash docs/calls/next-all-2.sh`, carry [".dev/b36"] (~6 min).
. "$(dirname "$0")/prelude.sh" b36
for v in 0:0:dynamic:ew7 2:2:dynamic:ew7 t2:t2:dynamic:ew7 t2:t2:clusters:ew7 0:0:dynamic:ew7 2:2:dynamic:ew7 \
         t2:t2:dynamic:coop; do
  IFS=: read w g sc sw <<< "$v"
  f=$OUT/r/layer_w${w}_g${g}_${sc}_${sw}_$(el).txt
  MEGAMOE_WGRAD_SKEW=$w MEGAMOE_GEMM_SKEW=$g MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_SWIGLU=$sw MEGAMOE_BENCH_ONLY=30B \
    timeout 75 b36/all/layer --bench > $f 2>&1
  echo "== layer 30B W $w G $g $sc $sw rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved\) |forward\+backward \(z saved, bf16)" $f | cut -c1-200
done
echo "total $(el) s"

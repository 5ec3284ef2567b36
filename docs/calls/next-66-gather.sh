#!/usr/bin/env bash
# Fifty-eighth session, one short call (~150 s): the gathering dW2 rebased onto main (branch wgrad-gather2, e5d227b;
# b145 = its libmegamoe_capi.so and its layer_forward / layer_backward / fp8 test binaries), then at SonicMoE's
# top-16 shape 30B n=256 (H 4096, I 256, E 256, k 16, T 32768) the step traced back to back with
# MEGAMOE_WGRAD_GATHER=0 / 1 alternating twice, one trace with the side copy off, and the Python test (main's python
# with the new MoE defaults). Carry [".dev/b145"].
# Predicted: the gather's tests bitwise the copy; at 30B n=256 the dh kernel 4157 -> ~2700-3000 us (no 4.3 GB dy
# write-out), dW2 (~1640 us of the 4929 us weight gradients) +0..+600 us: the step 1.03-1.06x shorter with it. The
# side copy off: the step 1.01-1.03x shorter (gather pass ~2.7 ms + plain dx ~3.7-4.2 ms against 7253 us).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b145
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-150}
B=b145/main
t layer_backward 30 110 wgrad_gather_matches_the_copy_i256_top16
t layer_forward 30 90 in_producer_wgrad_gather_narrow_tiles_i256_top16 in_producer_wgrad_gather_pass_side_copy_ragged
export MEGAMOE_LIB=$PWD/b145/capi/libmegamoe_capi.so
tr() { local tag=$1; shift
  f=$OUT/r/trace_sfg-30b-256_$tag.txt
  env "$@" PYTHONUNBUFFERED=1 timeout $(to 25 5) python3 ../benches/trace_step.py sfg-30b-256 z > $f 2>&1
  echo "== $tag rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-90)"
  grep -h "Traceback\|Error" $f | head -3
  grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -7 | cut -c1-90; }
tr gather0_1 MEGAMOE_WGRAD_GATHER=0
tr gather1_1 MEGAMOE_WGRAD_GATHER=1
tr gather0_2 MEGAMOE_WGRAD_GATHER=0
tr gather1_2 MEGAMOE_WGRAD_GATHER=1
tr sidecopy_off MEGAMOE_SIDE_COPY=off
PYTHONUNBUFFERED=1 timeout $(to 60 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test rc $? at $(el) s: $(tail -1 $OUT/r/torch_binding.txt | cut -c1-120)"
grep -E "FAIL|default with|Traceback|Error" $OUT/r/torch_binding.txt | head -6 | cut -c1-200
echo "total $(el) s"

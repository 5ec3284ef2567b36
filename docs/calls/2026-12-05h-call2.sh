#!/usr/bin/env bash
# Thirty-second session (not run). GEMM1's gathering producer in the epilogue-warps form
# (`grouped_gemm_swiglu_ew7_gather[_dyn]`, chosen for `Gather::InProducer` under the default SwiGLU policy): the
# whole producer warpgroup copies A's rows from the tokens by cp.async into each ring stage (no expert-ordered copy
# of x is written or read in the forward), four epilogue warps. Why: this session's headline (call 3) gave the
# cooperative gathering forward 2500 us against the default (overlapped: movers + TMA, `_ew7_mv`) 2506 us, although
# the cooperative GEMM1 + SwiGLU runs ~10% slower than the `_ew7` one (0.84 against 0.94 of cuBLAS): with the `_ew7`
# main loop and epilogue the gathering forward should gain most of that (predicted 2360-2420 us, 2.47-2.53x
# PyTorch's 5981: issue 4's 2.5x forward target). The backward with `in-producer` and z saved copies x's rows for
# dW1 in dx's idle producer warps (the side copy, `grouped_gemm_bt_bf16_cpx`: the overlapped forward's movers moved
# into the backward) and sums dx in dW2's / dW1's idle warps as `overlapped` does, so its step is predicted level
# (+-1%: the same bytes moved, in another kernel) with the forward faster.
# (1) layer_forward's gather_in_producer tests (each against the pass bitwise, three forms: ew7 run-time walk, ew7
# static, cooperative) and in_producer tests (forward and backward against the pass, bitwise: z saved through the
# side copy, z recomputed through the pass), memcheck + synccheck of the ragged gather test; layer_backward whole and layer_forward whole with
# MEGAMOE_GATHER=in-producer; (2) the layer bench at 30B, overlapped / in-producer / overlapped / in-producer (each
# process's forward and forward + backward lines; the bench's own "x gathered in GEMM1's producer" line beside).
# Decides: in-producer the forward default (and then the backward's x copy moved into a kernel's idle warps) if its
# forward gains >= 3% beyond the spread of the two overlapped runs. Carry [".dev/b57"]; ~8 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b57
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b57/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t layer_forward 150 420 in_producer --nocapture
grep -h "rel err" $OUT/r/t_layer_forward.txt | head -16
mv $OUT/r/t_layer_forward.txt $OUT/r/t_layer_forward_gather.txt
for tool in memcheck synccheck; do
  timeout $(to 60 380) compute-sanitizer --tool $tool --error-exitcode 3 $B/layer_forward gather_in_producer_ragged \
    --exact --include-ignored --test-threads=1 > $OUT/r/$tool.txt 2>&1
  echo "== $tool rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/$tool.txt | tr '\n' ' ')"
done
for v in overlapped in-producer overlapped in-producer; do
  f=$OUT/r/layer_$v.$(el).txt
  MEGAMOE_GATHER=$v MEGAMOE_BENCH_ONLY=30B timeout $(to 75 170) $B/layer --bench > $f 2>&1
  echo "== layer $v rc $? at $(el) s"
  grep -h "^RESULT megamoe forward Q\|^RESULT megamoe forward, x gathered\|^RESULT megamoe forward+backward (z saved, bf16 weight gradients) Q" $f | cut -c1-170
done
MEGAMOE_GATHER=in-producer timeout $(to 150 20) $B/layer_backward --include-ignored --test-threads=1 > $OUT/r/t_layer_backward_ip.txt 2>&1
echo "== layer_backward (in-producer) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_backward_ip.txt)"
grep -hE "FAILED|panicked|\.\.\. $" $OUT/r/t_layer_backward_ip.txt | cut -c1-300 | head -6
echo "total $(el) s"

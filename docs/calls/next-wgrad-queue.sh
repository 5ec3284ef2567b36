#!/usr/bin/env bash
# Forty-fourth session (any card): the weight gradients' tile queue popped by every lane (`pop_each_lane`, the
# queue's empty barriers initialised for 8 x 32), and racecheck where the rings wrap. b101/main = main (this commit):
# gemm bench, grouped_gemm, layer_backward, layer_forward, fp8 test binaries; b101/old = b96's gemm bench (main
# bb219ad: the weight gradients as before). Carry [".dev/b101"].
# Predicted: (1) racecheck on the FP8 gather test with memcpy-async off: no `grouped_wgrad_bf16_mv_mc` reports left
# (they were the queue's), the FP8 weight gradients' scale reads still reported (their stage release is lane 0's
# after `bar.warp.sync`); (2) the bf16 gathering GEMM1 at 30B (its ring refilled many times) racecheck-reported at its
# `LDGSTS` sites as the FP8 one in default mode, none with memcpy-async off; (3) every weight-gradient test passes;
# (4) the weight gradients' time level (the queue is touched once a tile): within +-0.5% of b96's.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b101
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b101/main
BOUND=${BOUND:-420}
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
rc_one() { local tag=$1 bin=$2 test=$3 want=$4; shift 4
  timeout $(to $want 0) "$cs" --tool racecheck "$@" --error-exitcode 9 $B/$bin --include-ignored --exact $test \
    --test-threads=1 > $OUT/r/racecheck_${test}_$tag.txt 2>&1
  echo "== racecheck $test ($tag) rc $? at $(el) s"
  grep -E "RACECHECK SUMMARY|test result" $OUT/r/racecheck_${test}_$tag.txt | head -2
  grep -E "Race reported" $OUT/r/racecheck_${test}_$tag.txt | sed -E 's/\+0x[0-9a-f]+//g' | sort | uniq -c | head -8; }
rc_one no_memcpy_async fp8 fp8_x_gathered_in_the_producer_is_bitwise_the_pass 40 --racecheck-memcpy-async no
t grouped_gemm 120 250 wgrad
t fp8 60 200 wgrad
for b in old main; do
  MEGAMOE_BENCH_PART=wgrad MEGAMOE_BENCH_ONLY=30B timeout $(to 40 100) b101/$b/gemm --bench > $OUT/r/gemm_wgrad_$b.txt 2>&1
  echo "== gemm wgrad $b rc $? at $(el) s"; alt_of gemm_wgrad_$b
done
t layer_backward 100 10
rc_one default layer_forward in_producer_qwen3_30b_a3b_t4096_save_z 150
echo "total $(el) s"

#!/usr/bin/env bash
# Thirty-second session, call 2 (after next-gemm-dyn.sh, an H100: the run-time walk 235B GEMM1 + SwiGLU 0.63 -> 0.82,
# dx 0.68 -> 0.89, GEMM2 0.85-0.87 -> 0.92, the rest level; ncu 235B GEMM1 DRAM read 8.0 -> 6.8 GB, floor 5.1;
# 30B on against one off: -1..-3% on GEMM1, GEMM2, dh: within drift?). Here: 30B on / off / on / off (the drift
# bound at 30B), 235B on once more, the layer bench at 30B off / on (forward and forward + backward step), then the
# layer_forward tests with the knob that the first call's 60 s bound cut (the persistent forward's 30B case).
# Predicted: 30B on within the off-off spread (+-2%); the layer step level at 30B. Carry [".dev/b54"].
. "$(dirname "$0")/prelude.sh" b54
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b54/dyn
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for run in 30B:dynamic:on 30B:static:off 30B:dynamic:on2 30B:static:off2 235B:dynamic:on3; do
  IFS=: read shape v name <<< "$run"
  MEGAMOE_GEMM_SCHED=$v MEGAMOE_BENCH_ONLY=$shape timeout $(to 60 300) $B/gemm --bench > $OUT/r/gemm_${shape}_$name.txt 2>&1
  echo "== gemm $shape $name rc $? at $(el) s ($(grep -m1 '^MEGAMOE_GEMM_SCHED' $OUT/r/gemm_${shape}_$name.txt))"
  alt_summary $OUT/r/gemm_${shape}_$name.txt | grep -v "dW"
done
for v in static dynamic static; do
  f=$OUT/r/layer_$v.$(el).txt
  MEGAMOE_GEMM_SCHED=$v MEGAMOE_BENCH_ONLY=30B timeout $(to 75 150) $B/layer --bench > $f 2>&1
  echo "== layer $v rc $? at $(el) s"
  grep -h "^RESULT megamoe forward \|^RESULT megamoe forward+backward (z saved, bf16 weight gradients) Q" $f | cut -c1-150
done
MEGAMOE_GEMM_SCHED=dynamic timeout $(to 250 5) $B/layer_forward ragged_shape half_the_experts_empty one_token \
  overlapped_gather_masked_save_z qwen3_30b_a3b_t4096 --include-ignored --test-threads=1 > $OUT/r/t_layer_forward_dyn.txt 2>&1
echo "== layer_forward (dyn) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_forward_dyn.txt)"
grep -hE "FAILED|panicked|\.\.\. $" $OUT/r/t_layer_forward_dyn.txt | cut -c1-300 | head -6
echo "total $(el) s"

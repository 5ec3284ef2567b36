#!/usr/bin/env bash
# Forty-fourth session (prepared, not run: the device budget was spent; any card, an H200 preferred): where the
# 128 x 256 FP8 GEMM's tensor pipe idles (64% on an H100). b103 = main's fp8 bench and fp8 tests with two probes of
# `grouped_gemm_fp8w`'s main loop (not GEMMs): `_probe1` each half still issued and waited for in turn with no
# promotion (no FFMA), `_probe2` both halves accumulated straight across the blocks (the bf16 kernels' loop:
# `wait_group 1`). Carry [".dev/b103"] (rebuild: `cargo bench --bench fp8 --no-run`, `cargo test --release --test fp8
# --no-run`, as fp8_bench and fp8, stripped and gzipped, if .dev is gone).
# Predicted: probe1 ~1.05x the wide kernel (the FFMA are ~20% of a warp's samples but overlap the other warpgroup's
# wgmma); probe2 1.25-1.4x (the serial issue-wait per half is the cost) with the tensor pipe ~80-85%. If probe2 is
# also ~65%: the data path (shared-memory operand reads beside TMA's writes) or the tile boundary bounds it.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b103
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b103/main
BOUND=${BOUND:-400}
t fp8 60 300 gemm_wide
for sh in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$sh timeout $(to 120 150) $B/fp8_bench --bench > $OUT/r/fp8_bench_$sh.txt 2>&1
  echo "== fp8_bench $sh rc $? at $(el) s"
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_$sh.txt | sed -E 's/RESULT fp8 ([^ ]+) (.*) M=.*FP8 ([0-9]+ us).*128 x 256 tiles ([0-9]+ us [0-9]+ TFLOP.s).*probes without the promotion(.*)/  \1 \2: staged \3, wide \4;\5/' | cut -c1-240
  grep -E "FAILED|panicked" $OUT/r/fp8_bench_$sh.txt | head -3
done
want="gpu__time_duration.sum sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum smsp__average_warp_latency_issue_stalled_barrier
smsp__average_warp_latency_issue_stalled_long_scoreboard smsp__inst_executed.sum"
m=$(ncu_metrics "$want")
MEGAMOE_BENCH_ONLY=30B timeout $(to 120 5) ncu --clock-control none -k 'regex:^grouped_gemm_fp8w(_probe[12])?$' \
  --launch-skip 3 --launch-count 6 --metrics "$m" --csv $B/fp8_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
ncu_table $OUT/r/ncu.csv | sed 's/average_warp_latency_issue_//g'
echo "total $(el) s"

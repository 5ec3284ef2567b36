#!/usr/bin/env bash
# Forty-fifth session (any card): the 128 x 256 FP8 GEMMs with their promotions' FFMA runs let yield. The probes
# (2026-12-06h call 1, an H100) put the FFMA promotion at the whole gap: wide 860 us, without promotion 683-699
# (tensor pipe 64% -> 80%). In the SASS half of each run's FFMA carry a reuse flag and the no-yield bit, so a warp
# issues its run in pairs that the other warpgroup's wgmma issue may wait behind. kernels-gpu/src/sass.rs clears
# both on those FFMA after ptxas for the manifest's `ffma_yield` kernels (58 of 121 FFMA in grouped_gemm_fp8w).
# b106 = main 0d2e0de+: fp8 bench, fp8 tests, layer bench; `grouped_gemm_fp8w_yf` is the plain wide kernel's
# patched twin. b107 = the same with every FP8 128 x 256 kernel of the layer patched (manifest: `ky` on the nine
# grouped_gemm_fp8w* kernels). Carry [".dev/b106", ".dev/b107"].
# Predicted: bitwise (b106's gemm_wide tests and the bench's check of the twin; b107's whole fp8 test binary when
# the twin gains); the twin 1.02-1.08x the
# plain wide kernel at both shapes, tensor pipe 64% -> 66-70%; then (only if the twin gains > 1%) the FP8 forward
# at 30B 1-4% faster in b107 than b106 against the same bf16 forward. Under 1.01x: the yield bit is not what
# holds the other warpgroup back (the other lead: the accumulators' register-file traffic beside the FFMA).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b106
for f in b107/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-560}
B=b106/main; t fp8 60 300 gemm_wide
for sh in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$sh timeout $(to 120 200) $B/fp8_bench --bench > $OUT/r/fp8_bench_$sh.txt 2>&1
  echo "== fp8_bench $sh rc $? at $(el) s"
  grep -E "RESULT fp8 .*M=" $OUT/r/fp8_bench_$sh.txt | sed -E 's/RESULT fp8 ([^ ]+) (.*) M=.*FP8 ([0-9]+ us).*128 x 256 tiles ([0-9]+ us [0-9]+ TFLOP.s).*probes without the promotion: (.*)\| 128 x 256 with the FFMA runs let yield (.*)/  \1 \2: staged \3, wide \4; yield \6; probes \5/' | cut -c1-260
  grep -E "FAILED|panicked" $OUT/r/fp8_bench_$sh.txt | head -3
done
want="gpu__time_duration.sum sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
smsp__average_warp_latency_issue_stalled_barrier smsp__average_warp_latency_issue_stalled_wait
smsp__average_warp_latency_issue_stalled_math_pipe_throttle smsp__average_warp_latency_issue_stalled_dispatch_stall
smsp__average_warp_latency_issue_stalled_not_selected smsp__average_warp_latency_issue_stalled_selected smsp__inst_executed.sum"
m=$(ncu_metrics "$want")
MEGAMOE_BENCH_ONLY=30B timeout $(to 60 200) ncu --clock-control none -k 'regex:^grouped_gemm_fp8w(_yf)?$' \
  --launch-skip 2 --launch-count 4 --metrics "$m" --csv $B/fp8_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; tail -1 $OUT/r/ncu.err
ncu_table $OUT/r/ncu.csv | sed 's/average_warp_latency_issue_//g'
gain=$(grep -h "GEMM1 (plain)" $OUT/r/fp8_bench_30B.txt | grep -oE "\(([0-9.]+)x the 128 x 256\)" | grep -oE "[0-9.]+" | head -1)
echo "twin / wide at 30B GEMM1: ${gain:-none}"
if [ -n "$gain" ] && python3 -c "import sys; sys.exit(0 if float('$gain') > 1.01 else 1)"; then
  B=b107/main; t fp8 150 120
  for b in b106 b107 b106 b107; do
    (( $(el) > BOUND - 100 )) && break
    MEGAMOE_BENCH_ONLY=30B timeout $(to 150 5) $b/main/layer --bench > $OUT/r/layer_$b.txt 2>&1
    echo "== layer 30B $b rc $? at $(el) s"
    grep -h "^RESULT megamoe forward FP8 Qwen\|^RESULT megamoe forward+backward FP8, z saved\|FAILED\|panicked" \
      $OUT/r/layer_$b.txt | sed -E 's/\(median of [0-9]+, alternating with the //' | cut -c1-200
  done
fi
echo "total $(el) s"

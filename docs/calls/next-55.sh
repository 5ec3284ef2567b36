#!/usr/bin/env bash
# Fifty-first session, second call (any card): b124 = main after the FP8 dh's producer prefetches into L2 the z that
# its epilogue reads (tensor-map prefetches of the tile's 16 boxes of 64 x 64: the gathering producer's thread 32
# for the previous tile once its barriers pass, the plain producer's thread with its last 4 k-steps). The first
# call (next-54.sh, b123, an H100) measured the FP8 dh kernel at 769 us under ncu against the FP8 dx's 959 us for
# twice the FLOPs: ~290 us over its main loop at dx's rate, i.e. its epilogue's z reads (403 MB) exposed while
# every SM's epilogue runs at about the same time. Same steps as next-54.sh. Carry [".dev/b124"].
# Predicted: every test passes (the prefetch is a hint: same bits); the FP8 dh kernel 600-700 us under ncu (the z
# reads found in L2; the dz and s h stores drain while the next tile's main loop runs); the layer bench's
# `Dx, Fp8Dh::Fp8` step within 0.99-1.03x the `Dx, Fp8Dh::Bf16` one (it was 0.972x: the dy gather pass for dW2
# that the bf16 dh's producer saves remains).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b124
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b124/main
BOUND=${BOUND:-580}
# the fp8 suite whole first (every FP8 kernel's parameter block grew `map_sh`), with the rel-err lines
timeout $(to 240 300) $B/fp8 --include-ignored --test-threads=1 --nocapture > $OUT/r/t_fp8.txt 2>&1
echo "== fp8 rc $? at $(el) s: $(grep 'test result' $OUT/r/t_fp8.txt)"
grep -E "FAILED|panicked|Fp8Dh|Fp8D|dw1_from|dy_codes" $OUT/r/t_fp8.txt | grep -v "^test .* ok$" | cut -c1-300 | head -14
MEGAMOE_BENCH_ONLY=30B timeout $(to 200 150) $B/layer_bench --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward+backward (z saved\|FP8\|FAILED\|panicked" $OUT/r/layer.txt | cut -c1-330
# each SwiGLU-backward GEMM's time under ncu (one metric, clocks free): the bf16 `grouped_gemm_bt_dswiglu_*` and the
# FP8 `grouped_gemm_fp8w_dswiglu_gather`, with the FP8 step's other wide kernels for their rates (the FP8 dx
# `_cpx`: 2 T k H 2I FLOP; the dh's 2 T k I H; its epilogue's exposed time ~ dh's time less 0.5x dx's at dx's rate)
MEGAMOE_BENCH_HEAT=0 MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout $(to 110 80) ncu --clock-control none \
  --kernel-name regex:"dswiglu|fp8w_cpx" --launch-count 400 --metrics gpu__time_duration.sum --csv \
  $B/layer_bench --bench > $OUT/r/ncu.csv 2> $OUT/r/ncu.err
echo "== ncu rc $? at $(el) s"; ncu_table $OUT/r/ncu.csv > $OUT/r/ncu.txt; tail -2 $OUT/r/ncu.err
python3 - $OUT/r/ncu.txt <<'PY'
import sys, re, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    m = re.match(r"\s*\d+ (\S+).*duration\.sum=([\d.,]+)", l)
    if m: d[m.group(1)].append(float(m.group(2).replace(",", "")))
for k, v in d.items(): print(f"  {k}: {len(v)} launches, median {statistics.median(v):.0f} (ncu's unit), min {min(v):.0f}")
PY
timeout $(to 70 60) $B/ep fp8_ep --include-ignored --test-threads=1 --nocapture > $OUT/r/t_ep_fp8.txt 2>&1
echo "== ep fp8_ep rc $? at $(el) s: $(grep 'test result' $OUT/r/t_ep_fp8.txt)"
grep -E "FAILED|panicked|FP8 EP" $OUT/r/t_ep_fp8.txt | cut -c1-330 | head -16
timeout $(to 150 5) $B/ep_bench --bench > $OUT/r/ep_bench.txt 2>&1
echo "== ep bench rc $? at $(el) s"
grep -h "FP8\|FAILED\|skipped" $OUT/r/ep_bench.txt | cut -c1-330
echo "total $(el) s"

#!/usr/bin/env bash
# Fifty-first session (any card): b123 = main after the FP8 dh epilogue's s h held in registers (ep, fp8, graph
# tests, layer bench, ep bench). The FP8 dh (`Fp8Dh::Fp8`, `grouped_gemm_fp8w_dswiglu[_gather]`): whole 64-row
# groups of dz and s h staged and stored by the copy engine, the rest from registers, z read once, 64 columns at
# a time by `ld.global` at constant offsets; s h computed with dz and held (16 words a batch) until the g box is
# free (b122 read z twice and recomputed s h: 11544 SASS instructions against 9448 now, main loop identical), and
# the next batch's z loads in flight while this batch's boxes are stored (main dcec4b7).
# Order as run: the whole fp8 suite (--nocapture: the FP8-dh tests' rel errs), the layer bench
# at 30B (its FP8 step line `Dx, Fp8Dh::Fp8` against `Dx, Fp8Dh::Bf16`), ncu's time of each SwiGLU-backward GEMM and the FP8 dx, the fp8_ep tests, the ep bench (the FP8 step with
# `Fp8Dy::Codes` + `Fp8Dh::Fp8` against the bf16-dy FP8 step). Carry [".dev/b123"] (or BDIR=bNN: another build).
# Predicted: every test passes; dx, dtopk, dW1 within ~1e-2 of the FP8-dh model (2.5e-2 asserted); dW2 bitwise the
# bf16-dh backward's; the EP FP8-dh backward bitwise its single-GPU twin. Timing (30B, the layer bench's
# alternating FP8 steps): `Dx, Fp8Dh::Fp8` 1.04-1.09x the `Dx, Fp8Dh::Bf16` step (dh's GEMM ~0.8 ms -> ~0.5-0.6).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
D=${BDIR:-b123}
. "$(dirname "$0")/prelude.sh" $D
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=$D/main
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

#!/usr/bin/env bash
# next-54.sh cut to ~7.5 min (BOUND=440) for a short device budget: the FP8-dh tests and the other new fp8 tests
# (--nocapture: rel errs), the layer bench at 30B (its FP8 step lines), the fp8_ep tests, then the whole fp8 suite
# as the bound leaves time. Carry [".dev/b123"]. Predictions as next-54.sh's header.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b123
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b123/main
BOUND=${BOUND:-440}
timeout $(to 80 200) $B/fp8 dh_ dy_codes dw1_from_codes dequantize_rows --include-ignored --test-threads=1 --nocapture > $OUT/r/t_fp8_new.txt 2>&1
echo "== fp8 new rc $? at $(el) s: $(grep 'test result' $OUT/r/t_fp8_new.txt)"
grep -E "FAILED|panicked|rel err|Fp8D" $OUT/r/t_fp8_new.txt | cut -c1-300 | head -12
MEGAMOE_BENCH_ONLY=30B timeout $(to 200 60) $B/layer_bench --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward+backward (z saved\|FP8\|FAILED\|panicked" $OUT/r/layer.txt | cut -c1-330
timeout $(to 70 5) $B/ep fp8_ep --include-ignored --test-threads=1 --nocapture > $OUT/r/t_ep_fp8.txt 2>&1
echo "== ep fp8_ep rc $? at $(el) s: $(grep 'test result' $OUT/r/t_ep_fp8.txt)"
grep -E "FAILED|panicked|FP8 EP" $OUT/r/t_ep_fp8.txt | cut -c1-330 | head -16
t fp8 240 5
echo "total $(el) s"

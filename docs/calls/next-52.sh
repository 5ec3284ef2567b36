#!/usr/bin/env bash
# Fiftieth session's first call (any card): b120 = main ca97943's ep, fp8, graph tests (the FP8 dh: `Fp8Dh::Fp8`,
# `grouped_gemm_fp8w_dswiglu[_gather]`; main 5ff6760 differs from it in docs and one import only), b121 = main
# 5ff6760's layer bench. next-51.sh's tests (the new ones with their rel errs, the fp8_ep ones), then the layer bench
# at 30B (its FP8 step lines: `Dx, Fp8Dh::Fp8` against `Dx, Fp8Dh::Bf16`), memcheck of the FP8 dh test, and the
# whole ep, graph, fp8 suites as the bound leaves time. Carry [".dev/b120", ".dev/b121"].
# Predicted: every test passes; dx, dtopk, dW1 within ~1e-2 of the FP8-dh model (2.5e-2 asserted); dW2 bitwise the
# bf16-dh backward's; the EP FP8-dh backward bitwise its single-GPU twin. Timing: the FP8 dh step 1.03-1.08x the
# `Dx, Fp8Dh::Bf16` step (dh's GEMM ~0.8 -> ~0.45-0.6 ms of a ~6.5-7.3 ms step), or level if the epilogue's half-sector
# register stores cost what the FP8 loop saves.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b120
for f in b121/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b120/main
BOUND=${BOUND:-575}
timeout $(to 90 400) $B/fp8 dh_ dy_codes dw1_from_codes dequantize_rows --include-ignored --test-threads=1 --nocapture > $OUT/r/t_fp8_new.txt 2>&1
echo "== fp8 new rc $? at $(el) s: $(grep 'test result' $OUT/r/t_fp8_new.txt)"
grep -E "FAILED|panicked|rel err|Fp8D" $OUT/r/t_fp8_new.txt | cut -c1-300 | head -12
timeout $(to 70 330) $B/ep fp8_ep --include-ignored --test-threads=1 --nocapture > $OUT/r/t_ep_fp8.txt 2>&1
echo "== ep fp8_ep rc $? at $(el) s: $(grep 'test result' $OUT/r/t_ep_fp8.txt)"
grep -E "FAILED|panicked|FP8 EP" $OUT/r/t_ep_fp8.txt | cut -c1-330 | head -16
MEGAMOE_BENCH_ONLY=30B timeout $(to 200 130) b121/main/layer_bench --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|^RESULT megamoe forward+backward (z saved\|FP8\|FAILED\|panicked" $OUT/r/layer.txt | cut -c1-330
timeout $(to 60 70) compute-sanitizer --tool memcheck --error-exitcode 9 $B/fp8 backward_fp8_dh_matches --include-ignored --test-threads=1 > $OUT/r/memcheck_dh.txt 2>&1
echo "== memcheck fp8 dh rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck_dh.txt | tr '\n' ' ')"
t ep 60 70
t graph 40 30
t fp8 240 5
echo "total $(el) s"

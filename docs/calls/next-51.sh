#!/usr/bin/env bash
# Forty-ninth session's second call (any card): b120 = this session's tree with the FP8 dh (`Fp8Dh::Fp8`,
# `grouped_gemm_fp8w_dswiglu[_gather]`: dh = dy W2 in FP8 with the SwiGLU backward in the epilogue), single-GPU and
# at EP (dy's codes on the owners). Runs the new tests with their rel-err lines (--nocapture), then the whole fp8,
# ep and graph suites (GroupedGemmFp8 grew three fields: every FP8 kernel's parameter block changed), memcheck of
# the FP8 dh test. Carry [".dev/b120"] (~5 min; BOUND bounds it).
# Predicted: every test passes; dx, dtopk, dW1 within ~1e-2 of the FP8-dh model (2.5e-2 asserted), dtopk ~3-5e-2 from
# the bf16-dh model; dW2 bitwise the bf16-dh backward's; the EP FP8-dh backward bitwise its single-GPU twin.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b120
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b120/main
BOUND=${BOUND:-420}
timeout $(to 90 300) $B/fp8 dh_ dy_codes dw1_from_codes dequantize_rows --include-ignored --test-threads=1 --nocapture > $OUT/r/t_fp8_new.txt 2>&1
echo "== fp8 new rc $? at $(el) s: $(grep 'test result' $OUT/r/t_fp8_new.txt)"
grep -E "FAILED|panicked|rel err|Fp8D" $OUT/r/t_fp8_new.txt | cut -c1-300 | head -12
timeout $(to 60 250) $B/ep fp8_ep --include-ignored --test-threads=1 --nocapture > $OUT/r/t_ep_fp8.txt 2>&1
echo "== ep fp8_ep rc $? at $(el) s: $(grep 'test result' $OUT/r/t_ep_fp8.txt)"
grep -E "FAILED|panicked|FP8 EP" $OUT/r/t_ep_fp8.txt | cut -c1-330 | head -16
timeout $(to 60 200) compute-sanitizer --tool memcheck --error-exitcode 9 $B/fp8 backward_fp8_dh_matches --include-ignored --test-threads=1 > $OUT/r/memcheck_dh.txt 2>&1
echo "== memcheck fp8 dh rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck_dh.txt | tr '\n' ' ')"
t ep 60 150
t graph 60 100
t fp8 240 5
echo "total $(el) s"

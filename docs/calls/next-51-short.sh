#!/usr/bin/env bash
# next-51.sh cut to ~3.5 min (a small device budget): the FP8 dh's new tests with their rel-err lines, the fp8_ep
# tests (the FP8 dh at EP among them), memcheck of the FP8 dh test, the whole ep suite. Carry [".dev/b120"].
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b120
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b120/main
BOUND=${BOUND:-210}
timeout $(to 90 110) $B/fp8 dh_ dy_codes dw1_from_codes --include-ignored --test-threads=1 --nocapture > $OUT/r/t_fp8_new.txt 2>&1
echo "== fp8 new rc $? at $(el) s: $(grep 'test result' $OUT/r/t_fp8_new.txt)"
grep -E "FAILED|panicked|rel err|Fp8D" $OUT/r/t_fp8_new.txt | cut -c1-300 | head -12
timeout $(to 40 70) $B/ep fp8_ep --include-ignored --test-threads=1 --nocapture > $OUT/r/t_ep_fp8.txt 2>&1
echo "== ep fp8_ep rc $? at $(el) s: $(grep 'test result' $OUT/r/t_ep_fp8.txt)"
grep -E "FAILED|panicked|FP8 EP" $OUT/r/t_ep_fp8.txt | cut -c1-330 | head -16
timeout $(to 40 30) compute-sanitizer --tool memcheck --error-exitcode 9 $B/fp8 backward_fp8_dh_matches --include-ignored --test-threads=1 > $OUT/r/memcheck_dh.txt 2>&1
echo "== memcheck fp8 dh rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck_dh.txt | tr '\n' ' ')"
t ep 30 2
echo "total $(el) s"

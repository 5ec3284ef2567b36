#!/usr/bin/env bash
# Forty-ninth session's call (any card). b119 = this session's tree: ep tests (`fp8_ep*`: the FP8 forward at EP
# and the new FP8 backward at EP, `EpLayer::backward_fp8`, bitwise the single-GPU `backward_fp8` with
# `Fp8Dw1X::Codes`), fp8 tests (`dequantize_rows` bit for bit, `Fp8Dw1X::Codes` single-GPU), graph tests
# (`graph_ep*`: the EP steps captured and replayed, the FP8 step's new), the ep bench (the FP8 forward alternating
# with the bf16 one, the FP8 step with the bf16 step). Then the owed FP8 tile call (next-fp8w192.sh through b117, MODE as given),
# then the whole ep suite and compute-sanitizer memcheck of the FP8 EP backward. Carry [".dev/b117", ".dev/b119"]
# (~6 min; BOUND / BOUND2 / BOUND3 bound the parts).
# Predicted: every test passes (bitwise; dW1 from codes within ~1e-2 of its model and ~3-4e-2 from the bf16-x
# model); the ep suite unchanged (the bf16 path's kernels are the same; quantize_fp8_rows reads one more word);
# the ep bench's FP8 forward ~1.2-1.4x the bf16 one, its FP8 forward + backward 1.05-1.15x the bf16 step (the
# single-GPU FP8 step with an FP8 dx was 1.09-1.10x at 30B; here dz's quantization and x's dequantization are
# passes over the receive rows); memcheck clean.
O=$OUT; here=$(dirname "$0")
mkdir -p $O/fp8 $O/ep
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
( OUT=$O/ep; . "$here/prelude.sh" b119; B=b119/main; BOUND=${BOUND:-300}
  t ep 120 150 fp8_ep
  grep -E "FP8 EP|rel err" $OUT/r/t_ep.txt | cut -c1-300 | head -12
  mv $OUT/r/t_ep.txt $OUT/r/t_ep_fp8.txt
  t fp8 60 120 dequantize_rows dw1_from_codes dy_codes
  grep -E "Fp8Dw1X|Fp8Dy" $OUT/r/t_fp8.txt | cut -c1-300 | head -4
  t graph 60 100 graph_ep
  timeout $(to 150 5) $B/ep_bench --bench > $OUT/r/ep_bench.txt 2>&1
  echo "== ep_bench rc $? at $(el) s"; grep -E "RESULT|FAILED|every mode" $OUT/r/ep_bench.txt | cut -c1-420
  tar czf $OUT/r1.tgz -C $OUT r && rm -rf $OUT/r )
OUT=$O/fp8 MODE=${MODE:-full} BOUND=${BOUND2:-300} bash $here/next-fp8w192.sh
( OUT=$O/ep; . "$here/prelude.sh" b119; B=b119/main; BOUND=${BOUND3:-150}
  t ep 100 40
  timeout $(to 60 5) compute-sanitizer --tool memcheck --error-exitcode 9 $B/ep fp8_ep2_backward_dx --include-ignored --test-threads=1 > $OUT/r/memcheck_ep.txt 2>&1
  echo "== memcheck fp8_ep2_backward rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck_ep.txt | tr '\n' ' ')"
  tar czf $OUT/r2.tgz -C $OUT r && rm -rf $OUT/r )

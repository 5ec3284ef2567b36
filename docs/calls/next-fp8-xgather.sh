#!/usr/bin/env bash
# Forty-third session, second call (any card). b93 = main with the FP8 `_gather` kernels (x's codes and scales
# gathered by the 128 x 256 GEMMs' producer warpgroup, the default; MEGAMOE_FP8_GATHER=pass the old pass):
# `BDIR=/work/main/.dev/b93 bash docs/calls/2026-12-04c-build.sh main fp8` and the capi as next-trace-step.sh's
# header says. Carry [".dev/b93"].
# 1. the fp8 tests whole (new: fp8_x_gathered_in_the_producer_is_bitwise_the_pass; every FP8 layer test now runs
#    the gathering kernels against the CPU reference), 2. memcheck of the new test, 3. the layer bench at 30B (its
#    FP8 lines; new: the FP8 forward and the z-saved FP8 step with the pass, alternating), 4. the FP8 step's trace.
# Predicted (H100, 30B): the FP8 forward 1731 -> 1600-1640 us (the pass's 164 us less 20-60 us of gathering in
# GEMM1, whose x codes, 33.5 MB, sit in L2), the z-saved FP8 step -1.5..-2.5% (6523 -> ~6400 us); GEMM1 + SwiGLU
# in the trace 868 -> 890-930 us, gather_rows gone from the forward.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b93
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-570}
B=b93/main
t fp8 200 300
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
timeout $(to 90 250) "$cs" --tool memcheck --error-exitcode 9 $B/fp8 --include-ignored --exact \
  fp8_x_gathered_in_the_producer_is_bitwise_the_pass --test-threads=1 > $OUT/r/memcheck.txt 2>&1
echo "== memcheck gather test rc $? at $(el) s"; grep -E "ERROR SUMMARY|test result" $OUT/r/memcheck.txt | head -3
MEGAMOE_BENCH_ONLY=30B timeout $(to 200 50) $B/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward Qwen\|FP8\|FAILED\|panicked" $OUT/r/layer.txt | cut -c1-400
export MEGAMOE_LIB=$PWD/b93/capi/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 60 0) python3 ../benches/trace_step.py 30B fp8 > $OUT/r/trace_step_fp8_30B.txt 2>&1
echo "== trace_step fp8 30B rc $? at $(el) s"
grep -h "^RESULT trace-step\|^check\|FAILED\|Error\|Traceback\|megamoe (fp8)" $OUT/r/trace_step_fp8_30B.txt | cut -c1-110
echo "total $(el) s"

#!/usr/bin/env bash
# Forty-third session, third call (any card). b94 = main b202c64: the EP layer's M-grouped GEMMs on the run-time
# tile walk (`grouped_gemm_bf16_scatter_dyn` new): `BDIR=/work/main/.dev/b94 bash docs/calls/2026-12-04c-build.sh
# main ep` and the ep bench as `ep_bench` (cargo bench --bench ep --no-run). Carry [".dev/b94"].
# 1. ep whole (bitwise EP = 1 in every mode, now on the run-time walk), 2. memcheck of two EP tests (push + copy,
# pull + scatter), 3. the ep bench (new: each mode's forward with the static walk alternating).
# Predicted: ep 27/27, memcheck clean; the emulated EP forward at 30B (2048 tokens a rank, 16 experts a rank)
# level with the static walk (0.98-1.02x), as the local layer at 30B was; the walk matters at 235B on an H100.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b94
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-570}
B=b94/main
t ep 240 200
cs="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
for n in ep4_masked_slots pull_scatter_ep4_backward_uneven_one_rank_empty; do
  timeout $(to 60 120) "$cs" --tool memcheck --error-exitcode 9 $B/ep --include-ignored --exact $n --test-threads=1 \
    > $OUT/r/memcheck_$n.txt 2>&1
  echo "== memcheck $n rc $? at $(el) s"; grep -E "ERROR SUMMARY|test result" $OUT/r/memcheck_$n.txt | head -3
done
timeout $(to 120 0) $B/ep_bench --bench > $OUT/r/ep_bench.txt 2>&1
echo "== ep_bench rc $? at $(el) s"
grep -h "^RESULT\|^every\|FAILED\|Error\|panicked" $OUT/r/ep_bench.txt | cut -c1-400
echo "total $(el) s"

#!/usr/bin/env bash
# Session 22 (2026-12-03k) call A = this script with `tests` (layer_backward cut at 150 s after 12 of 19 tests).
# Prepared in the fifteenth session (2026-12-03) for the next: the three CPU-checked patches of docs/wip in one device
# call, against main. Build both: in a worktree of main `cargo xtask gpu-bundle` -> copy layer into .dev/bN/base;
# on main after `git am docs/wip/fp8-dx-default.patch docs/wip/fp8-zt-stmatrix.patch
# docs/wip/dswiglu-fewer-instructions.patch` -> copy gpu_primitives, grouped_gemm, ep, fp8, graph, layer_backward, layer into .dev/bN.
# Carry .dev/bN and this script; two calls: `bash next-patches.sh tests` (~330 s), `bash next-patches.sh perf` (~280 s).
# Predictions (docs/NOTES.md "Next session" 2-4): the FP8 step's default (Dx) 1.03x the straight one; `_zt`
# 979 -> 870-920 us at 30B; grouped_gemm_bt_dswiglu -5..-10% (if its epilogue is fetch- or issue-bound: the
# WarpStateStats section below says which).
set -uo pipefail
cd "$(dirname "$0")/bN"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
what="${1:-tests}"
[ "$what" = tests ] && for t in gpu_primitives grouped_gemm ep fp8 graph layer_backward; do
  timeout 150 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/$t.txt)"
  grep -E "FAILED|panicked" $OUT/$t.txt | cut -c1-300 | head -6
done
[ "$what" = tests ] && { echo "total $(el) s"; exit 0; }
# stall reasons of the dh + SwiGLU-backward kernel, base and new (the instruction-fetch question)
for v in base .; do
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none --kernel-name regex:grouped_gemm_bt_dswiglu \
    --launch-count 1 --section WarpStateStats --section InstructionStats $v/layer --bench > $OUT/ncu_dsw_$(basename $(realpath $v)).txt 2>&1
  echo "== ncu dswiglu $v rc $? at $(el) s"; grep -E "Duration|No Instruction|Stall|Executed Instructions  " $OUT/ncu_dsw_$(basename $(realpath $v)).txt | head -12
done
MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none --launch-skip 640 --metrics gpu__time_duration.sum \
  --csv ./layer --bench > $OUT/ncu_30B.csv 2> $OUT/ncu_30B.err; echo "== ncu 30B rc $? at $(el) s"
for v in . base; do
  MEGAMOE_BENCH_ONLY=30B timeout 100 $v/layer --bench > $OUT/layer_30B_$(basename $(realpath $v)).txt 2>&1; echo "== layer 30B $v rc $? at $(el) s"
  grep -hE "RESULT.*(FP8|forward\+backward \(z saved)" $OUT/layer_30B_$(basename $(realpath $v)).txt | cut -c1-250
done
echo "total $(el) s"

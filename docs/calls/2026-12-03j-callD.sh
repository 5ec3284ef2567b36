#!/usr/bin/env bash
# 2026-12-03 (fifteenth session), call D: dz's row codes from the dh + SwiGLU-backward epilogue, second form: its own
# kernels (grouped_gemm_bt_dswiglu_q, _mc_q; the plain kernels' SASS as before, call C's plain kernel measured
# 936 us against 869), the quad's code exchange by bit masks (call C's if-chain compiled to a divergent jump table
# per pick: the kernel with codes ran 1831 us). Predicted at 30B: _q 950-980 us against the plain 870-900 (+~390
# instructions a (row, block) in the epilogue, one exposed z load a tile), Dx -70..-95 us against the base. Tests: grouped_gemm dswiglu (codes bitwise quantize_rows_cpu of the stored dz; dz and
# partials bitwise without codes; clusters), fp8 in full, graph's FP8 tests; ncu at 30B (FP8 section), layer
# bench new and base (acc2f5f) at 30B, new at 235B.
set -uo pipefail
cd "$(dirname "$0")/bD"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 60 ./grouped_gemm --include-ignored --test-threads=1 dswiglu > $OUT/grouped_gemm.txt 2>&1; echo "== grouped_gemm dswiglu rc $? at $(el) s: $(grep 'test result' $OUT/grouped_gemm.txt)"
grep -E "FAILED|panicked" $OUT/grouped_gemm.txt | cut -c1-300 | head -8
timeout 100 ./fp8 --include-ignored --test-threads=1 > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(el) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked" $OUT/fp8.txt | cut -c1-300 | head -8
timeout 60 ./graph --include-ignored --test-threads=1 fp8 > $OUT/graph.txt 2>&1; echo "== graph fp8 rc $? at $(el) s: $(grep 'test result' $OUT/graph.txt)"
grep -E "FAILED|panicked" $OUT/graph.txt | cut -c1-300 | head -4
MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 120 ncu --clock-control none --launch-skip 640 --metrics gpu__time_duration.sum \
  --csv ./layer --bench > $OUT/ncu_30B.csv 2> $OUT/ncu_30B.err; echo "== ncu 30B rc $? at $(el) s"
for v in . base .; do
  [ $(el) -gt 200 ] && break
  MEGAMOE_BENCH_ONLY=30B timeout 100 $v/layer --bench > $OUT/layer_30B_$(basename $(realpath $v))_$(el).txt 2>&1; echo "== layer 30B $v rc $? at $(el) s"
  grep -hE "RESULT.*FP8" $OUT/layer_30B_$(basename $(realpath $v))_*.txt | tail -6 | cut -c1-250
done
echo "total $(el) s"

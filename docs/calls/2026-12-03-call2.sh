#!/usr/bin/env bash
# Session 12 call 2: every GPU test at land-s12 (7992e1a: scheduler offsets in shared memory, opt-in clusters,
# tiles, scatter epilogue), then ncu (full set + SASS source counters) of one weight-gradient launch (30B dW2,
# dW1) and one dh + SwiGLU backward launch.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for t in grouped_gemm gpu_primitives layer_forward layer_backward ep route no_gpu; do
  t0=$(date +%s)
  timeout 200 ./$t --include-ignored --test-threads=1 > $OUT/t_$t.txt 2>&1; rc=$?
  echo "== $t rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/t_$t.txt | tail -1)"
  grep -E "FAILED|panicked" $OUT/t_$t.txt | head -5
done
timeout 100 ./megamoe > $OUT/t_megamoe.txt 2>&1; echo "== megamoe rc $?"
mkdir -p $OUT/t; mv $OUT/t_*.txt $OUT/t/ 2>/dev/null; (cd $OUT && tar czf tests.tgz t && rm -r t)
echo "tests done at $(( $(date +%s) - start )) s"
[ $(( $(date +%s) - start )) -gt 330 ] && { echo "no time for ncu"; exit 0; }
which ncu || ls /usr/local/cuda/bin | head
export MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1
timeout 150 ncu --clock-control none -k regex:"grouped_wgrad_f32|grouped_gemm_bt_dswiglu|grouped_gemm_bt_bf16" --launch-count 4 \
  --set full --import-source no -o $OUT/prof ./layer --bench > $OUT/ncu_run.txt 2>&1; echo "ncu rc $?"
tail -3 $OUT/ncu_run.txt
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu --import $OUT/prof.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass.csv 2>&1
ls -la $OUT; gzip $OUT/ncu_sass.csv $OUT/prof.ncu-rep 2>/dev/null
grep -E "^  [a-z_]+.*\(|Duration|Throughput|Warp Cycles Per Issued|Eligible|Registers Per|Achieved Occ" $OUT/ncu_details.txt | head -60
echo "total $(( $(date +%s) - start )) s"

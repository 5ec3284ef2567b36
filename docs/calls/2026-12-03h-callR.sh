#!/usr/bin/env bash
# 2026-12-03 (thirteenth session), call R: regression after the bf16 weight gradients' ring fix (the ring barriers
# moved out of consumer warp 6's staging; PTX otherwise unchanged): every GPU test binary the fix can reach that
# call X did not run (ep, graph, layer_forward, gpu_primitives, route, no_gpu) in parallel, then the 30B layer bench
# (bf16 forward, forward + backward; the FP8 rows). Predicted: all pass; the layer figures as in call H (+-2%).
set -uo pipefail
cd "$(dirname "$0")/bR"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
run() { local name=$1; shift; local t0=$(date +%s); "$@" --include-ignored --test-threads=1 > $OUT/$name.txt 2>&1; local rc=$?
  echo "== $name rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$name.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/$name.txt | head -8; }
run ep timeout 200 ./ep &
run graph timeout 200 ./graph &
run layer_forward timeout 230 ./layer_forward &
run gpu_primitives timeout 100 ./gpu_primitives &
run route timeout 100 ./route &
run no_gpu timeout 60 ./no_gpu &
wait
if [ $(( $(date +%s) - start )) -lt 260 ]; then
  t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 140 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $? in $(( $(date +%s) - t0 )) s"
  grep RESULT $OUT/layer.txt | cut -c1-230 | head -12
fi
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# 2026-12-03 (eleventh session), call B (same build as call A): the 30B layer bench with and without the dy copy
# (MEGAMOE_DY_GATHER=pass / tma, alternating processes; its last line: the z-saved step as one CUDA graph against
# eager), and the gemm bench's dh A/B line (gathered copy against TMA row gather).
set -uo pipefail
cd "$(dirname "$0")/bA"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
lay() { local mode=$1 i=$2; late 470 && return; local t0=$(date +%s)
  MEGAMOE_DY_GATHER=$mode MEGAMOE_BENCH_ONLY=30B timeout 110 ./layer --bench > $OUT/layer_${mode}_$i.txt 2>&1
  echo "== layer dy $mode ($i) rc $? in $(( $(date +%s) - t0 )) s"
  grep RESULT $OUT/layer_${mode}_$i.txt | grep -E "z saved|CUDA graph|forward Qwen" | cut -c1-230; }
lay pass 1
lay tma 1
late 300 || { t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 70 ./gemm --bench > $OUT/gemm.txt 2>&1; echo "== gemm rc $? in $(( $(date +%s) - t0 )) s"
  grep RESULT $OUT/gemm.txt | grep -E "dh" | sed 's/(sample rel err[^)]*)//' | cut -c1-230; }
lay pass 2
lay tma 2
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# session 24 call 5: gemm bench with the ping-pong and the epilogue-warps SwiGLU backward side by side (same binary,
# MEGAMOE_DSW=pp / ew), 30B then 235B
set -uo pipefail
cd "$(dirname "$0")/b8"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for m in 30B 235B; do for dsw in pp ew ew pp; do
  [ $(el) -gt 200 ] && break
  MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=$m timeout 60 ./gemm --bench > $OUT/gemm_${m}_$dsw.txt.tmp 2>&1; rc=$?
  cat $OUT/gemm_${m}_$dsw.txt.tmp >> $OUT/gemm_${m}_$dsw.txt; rm $OUT/gemm_${m}_$dsw.txt.tmp
  echo "== gemm $m MEGAMOE_DSW=$dsw rc $rc at $(el) s"
  grep "SwiGLU backward" $OUT/gemm_${m}_$dsw.txt | tail -2 | sed -E "s/.*(RESULT gemm[-a-z]*) .*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/\1 \2 \3 \4/"
done; done
echo "total $(el) s"

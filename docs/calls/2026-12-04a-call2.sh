#!/usr/bin/env bash
# Seventeenth session, call 2: where a 30B GEMM1 (plain, grouped_gemm_bf16, 128 x 256 cooperative) tile's time goes,
# ragged (random routing) against uniform (balanced: no partial m-tiles): ncu --set full of the gemm bench's first
# timed launch, SASS stall samples of both (docs/studies/ncu_sass_stalls.py); then the gemm bench at 235B for issue
# 4's alternating ratios. Binary: main 9adfa95's gemm bench, stripped, in .dev/b1/base (carry .dev/b1, this file as
# .dev/call2.sh).
set -uo pipefail
cd "$(dirname "$0")/b1/base"
start=$(date +%s); el() { echo $(( $(date +%s) - start )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for v in ragged uniform; do
  r=random; [ $v = uniform ] && r=balanced
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_ROUTING=$r timeout 200 ncu --clock-control none -k regex:"^grouped_gemm_bf16$" \
    --launch-skip 3 --launch-count 1 --set full --import-source no -o $OUT/prof_$v ./gemm --bench > $OUT/ncu_run_$v.txt 2>&1
  echo "== $v ncu rc $? at $(el) s"
  ncu --import $OUT/prof_$v.ncu-rep --page details > $OUT/ncu_details_$v.txt 2>&1
  ncu --import $OUT/prof_$v.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass_$v.csv 2>&1
  gzip $OUT/ncu_sass_$v.csv; rm -f $OUT/prof_$v.ncu-rep
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Warp Cycles Per Issued" \
    $OUT/ncu_details_$v.txt | head -8
done
MEGAMOE_BENCH_ONLY=235B timeout 200 ./gemm --bench > $OUT/gemm_235B.txt 2>&1; echo "== gemm 235B rc $? at $(el) s"
grep "gemm-alternating" $OUT/gemm_235B.txt | sed 's/RESULT gemm-alternating Qwen3-//; s/ M=.*: megamoe/:/; s/(medians.*target/(target/' | cut -c1-170
echo "total $(el) s"

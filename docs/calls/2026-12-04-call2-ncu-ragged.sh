#!/usr/bin/env bash
# Prepared 2026-12-03 (not run): what sets an M-grouped tile's time. Bundle from main (the gemm bench's
# MEGAMOE_BENCH_ROUTING=balanced: every expert exactly 1024 rows, no partial tiles), this file as .dev/call2.sh,
# carry [".dev/bundle", ".dev/call2.sh"]. ncu --set full of one launch of
# the 30B GEMM2 (grouped_gemm_bf16, the bench's first) with ragged and with uniform routing, the SASS source
# counters of both, so that the extra 6% of the ragged run can be placed: the tensor pipe's activity, the
# consumers' stalls (full-barrier waits, wgmma waits, the register-path epilogue of partial tiles), L2 / TMA.
set -uo pipefail
cd "$(dirname "$0")/bundle"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for v in ragged uniform; do
  [ $(( $(date +%s) - start )) -gt 300 ] && break
  r=random; [ $v = uniform ] && r=balanced
  MEGAMOE_BENCH_ROUTING=$r timeout 200 ncu --clock-control none -k regex:"^grouped_gemm_bf16$" --launch-skip 3 \
    --launch-count 1 --set full --import-source no -o $OUT/prof_$v ./gemm --bench > $OUT/ncu_run_$v.txt 2>&1
  echo "== $v ncu rc $? at $(( $(date +%s) - start )) s"
  ncu --import $OUT/prof_$v.ncu-rep --page details > $OUT/ncu_details_$v.txt 2>&1
  ncu --import $OUT/prof_$v.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass_$v.csv 2>&1
  gzip $OUT/ncu_sass_$v.csv $OUT/prof_$v.ncu-rep
  grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Tensor|Warp Cycles Per Issued" \
    $OUT/ncu_details_$v.txt | head -12
done
(cd $OUT && tar czf ncu_details.tgz ncu_details_*.txt ncu_run_*.txt)
echo "total $(( $(date +%s) - start )) s"

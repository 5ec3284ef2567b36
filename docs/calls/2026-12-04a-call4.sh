#!/usr/bin/env bash
# Seventeenth session, call 4: does the default memory pool's L2 compression cost anything? (call 2: ncu saw GEMM1's
# 415 MB of output sent to the L2 compression unit, 0% compressed). MEGAMOE_POOL=own allocates from a pool of our
# own (cuMemPoolCreate) instead. 1. ncu --set full of one GEMM1 launch per pool (duration, compression sectors);
# 2. the gemm bench at 30B per pool (alternating lines); 3. the layer bench at 30B per pool, twice alternating.
# Predicted: the compression sectors 0 with `own`; times within +-1% (the GEMMs are not DRAM-bound), perhaps a
# little faster on the HBM-bound passes (gather, combine). Binaries: .dev/b4 (main + the env switch), stripped.
set -uo pipefail
cd "$(dirname "$0")/b4"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for pool in default own; do
  MEGAMOE_POOL=$pool MEGAMOE_BENCH_ONLY=30B timeout 100 ncu --clock-control none -k regex:"^grouped_gemm_bf16$" --launch-skip 3 \
    --launch-count 1 --set full -o $OUT/prof_$pool ./gemm --bench > $OUT/ncu_run_$pool.txt 2>&1
  echo "== ncu $pool rc $? at $(el) s"
  ncu --import $OUT/prof_$pool.ncu-rep --page details > $OUT/ncu_details_$pool.txt 2>&1; rm -f $OUT/prof_$pool.ncu-rep
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compression|SM Frequency" $OUT/ncu_details_$pool.txt | head -8
done
for pool in default own; do
  MEGAMOE_POOL=$pool MEGAMOE_BENCH_ONLY=30B timeout 60 ./gemm --bench > $OUT/gemm_$pool.txt 2>&1; echo "== gemm 30B $pool rc $? at $(el) s"
  grep "gemm-alternating" $OUT/gemm_$pool.txt | sed 's/RESULT gemm-alternating Qwen3-//; s/ M=.*: megamoe/:/; s/(medians.*target/(target/' | cut -c1-150
done
for round in 1 2; do
  for pool in default own; do
    [ $(el) -gt 440 ] && break
    MEGAMOE_POOL=$pool MEGAMOE_BENCH_ONLY=30B timeout 90 ./layer --bench > $OUT/layer_${round}_$pool.txt 2>&1
    echo "== layer 30B round $round $pool rc $? at $(el) s"; grep "^RESULT" $OUT/layer_${round}_$pool.txt | cut -c1-160 | head -8
  done
done
echo "total $(el) s"

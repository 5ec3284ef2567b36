#!/usr/bin/env bash
# Prepared in the sixteenth session for the next: one device call (~300 s) for both prepared items.
# Build: on main `cargo xtask gpu-bundle .dev/bundle`, copy gpu_primitives, layer and gemm into .dev/bN/base; then
# `git apply docs/wip/fp8w-scales-ahead.patch docs/wip/dswiglu-share-b.patch`, bundle again, copy fp8, graph, layer,
# grouped_gemm into .dev/bN; strip them all
# (`strip .dev/bN/* .dev/bN/base/*`: the carry limit is 64 MiB with the tree). Carry .dev/bN and this script.
# 1. Multicast: does a TMA multicast read L2 once? (docs/NOTES.md "Next session" 1; docs/calls/next-multicast.sh)
# 2. fp8w-scales-ahead: fp8 45/45 and graph's FP8 tests on the patched binaries, then the wide FP8 kernels per
#    launch at 30B under ncu, base then new. Predicted -2..-4% on grouped_gemm_fp8w* (GEMM1 _q 824 us, GEMM2 448,
#    dx 813 at 30B, sixteenth session).
# 2b. dswiglu-share-b: the B-sharing cluster SwiGLU backward (opt-in MEGAMOE_MC=b): its bitwise test, then ncu of
#    the dswiglu launches with MEGAMOE_MC=b against MEGAMOE_MC=0 on the same binary (duration, L2 read sectors, L2 %).
#    Predicted 845 -> 700-780 us if the multicast cuts L2 reads as designed.
set -uo pipefail
cd "$(dirname "$0")/bN"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
mc="tma_2d_loaded_per_cta_in_clusters tma_2d_multicast_into_both_ctas"
timeout 60 base/gpu_primitives --include-ignored --test-threads=1 --exact $mc > $OUT/mc_tests.txt 2>&1
echo "== multicast tests rc $? at $(el) s: $(grep 'test result' $OUT/mc_tests.txt)"; grep -E "FAILED|panicked" $OUT/mc_tests.txt | head -4
timeout 120 ncu --clock-control none -k regex:selftest_tma_mc --metrics lts__t_sectors_op_read.sum,gpu__time_duration.sum \
  --csv base/gpu_primitives --include-ignored --test-threads=1 --exact $mc > $OUT/mc_ncu.csv 2> $OUT/mc_ncu.err
echo "== multicast ncu rc $? at $(el) s (mode 0 first, then mode 1)"; grep selftest_tma_mc $OUT/mc_ncu.csv | awk -F'","' '{print $(NF-2), $NF}' | head -4
for t in fp8 graph; do
  timeout 150 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/$t.txt)"
  grep -E "FAILED|panicked" $OUT/$t.txt | cut -c1-300 | head -6
done
timeout 90 ./grouped_gemm --include-ignored --test-threads=1 dswiglu > $OUT/dswiglu_tests.txt 2>&1
echo "== grouped_gemm dswiglu tests rc $? at $(el) s: $(grep 'test result' $OUT/dswiglu_tests.txt)"; grep -E "FAILED|panicked" $OUT/dswiglu_tests.txt | head -4
for mc in 0 b; do
  MEGAMOE_MC=$mc MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu --launch-count 6 \
    --metrics gpu__time_duration.sum,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed --csv ./layer --bench \
    > $OUT/ncu_dsw_mc$mc.csv 2> $OUT/ncu_dsw_mc$mc.err
  echo "== ncu dswiglu MEGAMOE_MC=$mc rc $? at $(el) s"
  grep -o '"grouped_gemm_bt_dswiglu[a-z_]*".*' $OUT/ncu_dsw_mc$mc.csv | awk -F'","' '{print $1, $(NF-2), $NF}' | head -18
done
for v in base .; do
  n=$(basename $(realpath $v))
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_fp8w --launch-count 40 \
    --metrics gpu__time_duration.sum --csv $v/layer --bench > $OUT/ncu_fp8w_$n.csv 2> $OUT/ncu_fp8w_$n.err
  echo "== ncu fp8w $n rc $? at $(el) s"
  python3 - $OUT/ncu_fp8w_$n.csv <<'PY'
import csv,sys,collections
r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]
h=r[0]; d=collections.defaultdict(list)
for x in r[1:]: d[x[h.index('Kernel Name')][:40]].append(float(x[h.index('Metric Value')].replace(',',''))/1000)
for k,v in sorted(d.items()): v=sorted(v); print(f"  {k:40s} n={len(v):2d} " + " ".join(f"{u:.0f}" for u in v))
PY
done
# 3. issue 4's ratios with ours and cuBLAS alternating launch by launch (the gemm bench's new lines), if time is left
if [ $(el) -lt 360 ]; then
  MEGAMOE_BENCH_ONLY=30B timeout 150 base/gemm --bench > $OUT/gemm_30B.txt 2>&1; echo "== gemm 30B rc $? at $(el) s"
  grep "gemm-alternating" $OUT/gemm_30B.txt | sed 's/RESULT gemm-alternating Qwen3-//; s/ M=.*: megamoe/:/; s/(medians.*target/(target/' | cut -c1-170
fi
echo "total $(el) s"

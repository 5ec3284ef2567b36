#!/usr/bin/env bash
# Eighteenth session (2026-12-04b), call 1: this script run as `PART=a bash .dev/call.sh` with bN = b5 (base: main d0edd73's gemm and layer bench; new: the patch applied, unchanged).
# Prepared in the seventeenth session (not run): the dh + SwiGLU backward with its epilogue in the producer
# warpgroup's idle warps (docs/wip/dswiglu-epilogue-warps.patch, `grouped_gemm_bt_dswiglu_ew`, opt-in MEGAMOE_DSW=ew).
# Build: on main `cargo xtask gpu-bundle .dev/bundle`, copy gemm and layer into .dev/bN/base; then
# `git apply docs/wip/dswiglu-epilogue-warps.patch`, bundle again, copy grouped_gemm, layer_backward, layer, gemm into
# .dev/bN; `strip .dev/bN/* .dev/bN/base/*`; this file as .dev/call.sh with bN replaced; carry both.
# Two calls: `PART=a bash .dev/call.sh` (tests, ncu of the dswiglu kernels and of the plain ones, a full profile of
# the new kernel with its SASS samples for docs/studies/ncu_sass_stalls.py; ~5 min), then `PART=b` (layer_backward
# with MEGAMOE_DSW=ew, the layer bench alternating pp / ew; ~8 min).
# Predicted (docs/NOTES.md "Next session" 1): the dswiglu kernel 845 -> 700-740 us under ncu at 30B, the plain
# kernels unchanged (their SASS moved a little with the patch: same instruction count, the first HGMMA of the k-step
# scheduled elsewhere); the 30B step ~100-150 us faster.
set -uo pipefail
cd "$(dirname "$0")/b5"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ "${PART:-a}" = a ]; then
timeout 90 ./grouped_gemm --include-ignored --test-threads=1 > $OUT/grouped_gemm.txt 2>&1
echo "== grouped_gemm rc $? at $(el) s: $(grep 'test result' $OUT/grouped_gemm.txt)"; grep -E "FAILED|panicked" $OUT/grouped_gemm.txt | cut -c1-300 | head -6
summ() { python3 - "$1" <<'PY'
import csv,sys,collections
r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]
h=r[0]; d=collections.defaultdict(list)
for x in r[1:]:
    k=(x[h.index('Kernel Name')][:34], x[h.index('Metric Name')])
    d[k].append(float(x[h.index('Metric Value')].replace(',','')))
for (k,m),v in sorted(d.items()):
    v=sorted(v); sc=1000 if m.startswith('gpu__time') else 1
    print(f"  {k:34s} {m[:28]:28s} n={len(v):2d} " + " ".join(f"{u/sc:.0f}" for u in v))
PY
}
for dsw in pp ew; do
  MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu \
    --launch-count 6 --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed --csv ./layer --bench \
    > $OUT/ncu_dsw_$dsw.csv 2> $OUT/ncu_dsw_$dsw.err
  echo "== ncu dswiglu MEGAMOE_DSW=$dsw rc $? at $(el) s"; summ $OUT/ncu_dsw_$dsw.csv
done
for v in base .; do
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:"^grouped_gemm_(bf16|bt_bf16)$" \
    --launch-count 16 --metrics gpu__time_duration.sum --csv $v/layer --bench > $OUT/ncu_plain_$(basename $(realpath $v)).csv 2>&1
  echo "== ncu plain kernels $v rc $? at $(el) s"; summ $OUT/ncu_plain_$(basename $(realpath $v)).csv
done
MEGAMOE_DSW=ew MEGAMOE_BENCH_ONLY=30B timeout 120 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew --launch-skip 2 \
  --launch-count 1 --set full --import-source no -o $OUT/prof_ew ./layer --bench > $OUT/ncu_full_ew.txt 2>&1
echo "== ncu --set full of the ew kernel rc $? at $(el) s"
ncu --import $OUT/prof_ew.ncu-rep --page details > $OUT/ncu_details_ew.txt 2>&1
ncu --import $OUT/prof_ew.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass_ew.csv 2>&1
gzip $OUT/ncu_sass_ew.csv; rm -f $OUT/prof_ew.ncu-rep
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput" $OUT/ncu_details_ew.txt | head -6
fi
if [ "${PART:-a}" = b ]; then
MEGAMOE_DSW=ew timeout 280 ./layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward_ew.txt 2>&1
echo "== layer_backward with MEGAMOE_DSW=ew rc $? at $(el) s: $(grep 'test result' $OUT/layer_backward_ew.txt)"
grep -E "FAILED|panicked" $OUT/layer_backward_ew.txt | cut -c1-300 | head -6
for round in 1 2; do
  for dsw in pp ew; do
    [ $(el) -gt 500 ] && break
    MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=30B timeout 80 ./layer --bench > $OUT/layer_${round}_$dsw.txt 2>&1
    echo "== layer 30B round $round MEGAMOE_DSW=$dsw rc $? at $(el) s"
    grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/layer_${round}_$dsw.txt | cut -c1-150
  done
done
fi
echo "total $(el) s"

#!/usr/bin/env bash
# session 24 call 3: ew epilogue software-pipelined (next step's z loads before this step's math), four rows' partials in six shuffles, producer WG 152 regs
set -uo pipefail
cd "$(dirname "$0")/b7"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
timeout 90 ./grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"; grep -E "FAILED|panicked" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -6
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
for v in "pp layer_base" "ew layer" "pp layer"; do
  set -- $v
  MEGAMOE_DSW=$1 MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu \
    --launch-count 4 --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed --csv ./$2 --bench \
    > $OUT/r/ncu_$1_$2.csv 2> $OUT/r/ncu_$1_$2.err
  echo "== ncu dswiglu MEGAMOE_DSW=$1 $2 rc $? at $(el) s"; summ $OUT/r/ncu_$1_$2.csv
done
MEGAMOE_DSW=ew MEGAMOE_BENCH_ONLY=30B timeout 120 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew --launch-skip 2 \
  --launch-count 1 --set full --import-source no -o $OUT/prof_ew ./layer --bench > $OUT/r/ncu_full_ew.txt 2>&1
echo "== ncu --set full of the ew kernel rc $? at $(el) s"
ncu --import $OUT/prof_ew.ncu-rep --page details > $OUT/r/ncu_details_ew.txt 2>&1
ncu --import $OUT/prof_ew.ncu-rep --page source --print-source sass --csv > $OUT/r/ncu_sass_ew.csv 2>&1
rm -f $OUT/prof_ew.ncu-rep
grep -E "Duration|DRAM Throughput|L2 Cache Throughput" $OUT/r/ncu_details_ew.txt | head -4
med() { python3 - "$1" <<'PY'
import csv,sys
r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]; h=r[0]
v=sorted(float(x[h.index('Metric Value')].replace(',','')) for x in r[1:] if x[h.index('Metric Name')].startswith('gpu__time'))
print(int(v[len(v)//2]) if v else 10**9)
PY
}
if [ $(med $OUT/r/ncu_ew_layer.csv) -lt $(med $OUT/r/ncu_pp_layer.csv) ]; then
  MEGAMOE_DSW=ew timeout 250 ./layer_backward --include-ignored --test-threads=1 > $OUT/r/layer_backward_ew.txt 2>&1
  echo "== layer_backward with MEGAMOE_DSW=ew rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward_ew.txt)"
  grep -E "FAILED|panicked" $OUT/r/layer_backward_ew.txt | cut -c1-300 | head -6
  for dsw in pp ew pp ew; do
    [ $(el) -gt 510 ] && break
    MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=30B timeout 70 ./layer --bench > $OUT/r/layer_$dsw.txt 2>&1
    echo "== layer 30B MEGAMOE_DSW=$dsw rc $? at $(el) s"
    grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_$dsw.txt | cut -c1-150
  done
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

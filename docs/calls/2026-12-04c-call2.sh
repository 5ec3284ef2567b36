#!/usr/bin/env bash
# Probes of the _ew dh + SwiGLU backward (19th session): base; half = the epilogue warps do ~55% of the rows (6 of
# 11 steps); nostore = dz / s h stores skipped (compute kept); noz = z loads skipped (g = u = 0). ncu at 30B.
set -uo pipefail
cd "$(dirname "$0")/b10"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
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
mkdir -p $OUT/r
for f in */*.gz; do gunzip -f $f && chmod +x ${f%.gz}; done
k=0
for v in base half nostore noz base; do
  k=$((k + 1))
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 4 --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv $v/layer --bench > $OUT/r/ncu_${k}_$v.csv 2> $OUT/r/ncu_${k}_$v.err
  echo "== ncu $v rc $? at $(el) s"; summ $OUT/r/ncu_${k}_$v.csv
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

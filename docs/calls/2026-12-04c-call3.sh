#!/usr/bin/env bash
# 19th session call A: the _ew SwiGLU backward with the consumers' row share (CR rows of each consumer warp's 16):
# grouped_gemm tests (cr4 first), ncu at 30B base / cr4 / cr6 / cr7 / cr4, gemm bench base vs cr4 (alternating),
# fp8 tests (cr4), grouped_gemm tests cr6 / cr7.
set -uo pipefail
cd "$(dirname "$0")/b11"
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
tst() { timeout $3 $1/$2 --include-ignored --test-threads=1 > $OUT/r/$2_$1.txt 2>&1
  echo "== $2 ($1) rc $? at $(el) s: $(grep 'test result' $OUT/r/$2_$1.txt)"
  grep -E "FAILED|panicked" $OUT/r/$2_$1.txt | cut -c1-300 | head -6; }
tst cr4 grouped_gemm 100
k=0
for v in base cr4 cr6 cr7 cr4; do
  k=$((k + 1))
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 4 --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv $v/layer --bench > $OUT/r/ncu_${k}_$v.csv 2> $OUT/r/ncu_${k}_$v.err
  echo "== ncu $v rc $? at $(el) s"; summ $OUT/r/ncu_${k}_$v.csv
done
for v in base cr4 base cr4; do
  MEGAMOE_BENCH_ONLY=30B timeout 60 $v/gemm --bench >> $OUT/r/gemm_$v.txt 2>&1
  echo "== gemm 30B $v rc $? at $(el) s"
  grep "SwiGLU backward" $OUT/r/gemm_$v.txt | tail -2 | sed -E "s/.*(RESULT gemm[-a-z]*) .*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/\1 \2 \3 \4/"
done
tst cr4 fp8 120
[ $(el) -lt 420 ] && tst cr6 grouped_gemm 80
[ $(el) -lt 480 ] && tst cr7 grouped_gemm 80
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

#!/usr/bin/env bash
# 19th session call B: the consumers' share run after the stage's release (mainloop_coop_with's hook moved):
# ncu at 30B base / a4 (CR 4) / a4h (CR 4, a chunk every other k-step) / a6 (CR 6) / base; grouped_gemm and
# layer_backward tests with a4; gemm bench a4 once.
set -uo pipefail
cd "$(dirname "$0")/b12"
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
k=0
for v in base a4 a4h a6; do
  k=$((k + 1))
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 3 --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv $v/layer --bench > $OUT/r/ncu_${k}_$v.csv 2> $OUT/r/ncu_${k}_$v.err
  echo "== ncu $v rc $? at $(el) s"; summ $OUT/r/ncu_${k}_$v.csv
done
tst a4 grouped_gemm 100
MEGAMOE_BENCH_ONLY=30B timeout 60 a4/gemm --bench > $OUT/r/gemm_a4.txt 2>&1
echo "== gemm 30B a4 rc $? at $(el) s"
grep "SwiGLU backward" $OUT/r/gemm_a4.txt | tail -2 | sed -E "s/.*(RESULT gemm[-a-z]*) .*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/\1 \2 \3 \4/"
[ $(el) -lt 240 ] && tst a4 layer_backward 200
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

#!/usr/bin/env bash
# Session 22 call D (main 828a74b): the M-grouped GEMMs at 30B with and without the 2-CTA clusters sharing A
# (MEGAMOE_MC=a: TMA multicast of A, half the A bytes from L2). Call C: 5 stages did not help the dh + SwiGLU
# backward (L2 ~75% busy either way), so if L2 -> SM delivery bounds it, sharing A should move it.
set -uo pipefail
cd "$(dirname "$0")/bD"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
for mc in 0 a; do
  MEGAMOE_MC=$mc MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:"grouped_gemm_(bt_dswiglu|bt_bf16|bf16|swiglu)" \
    --launch-skip 20 --launch-count 30 --metrics gpu__time_duration.sum,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv ./layer --bench > $OUT/ncu_mc$mc.csv 2> $OUT/ncu_mc$mc.err
  echo "== ncu MC=$mc rc $? at $(el) s"
  python3 - $OUT/ncu_mc$mc.csv <<'PY'
import csv,sys,collections
r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]
h=r[0]; d=collections.defaultdict(list)
for x in r[1:]: d[(x[h.index('Kernel Name')][:40], x[h.index('Metric Name')][:28])].append(float(x[h.index('Metric Value')].replace(',','')))
for k,v in sorted(d.items()): print(f"  {k[0]:40s} {k[1]:28s} n={len(v):2d} med={sorted(v)[len(v)//2]:.4g} min={min(v):.4g} max={max(v):.4g}")
PY
done
for mc in a 0; do
  MEGAMOE_MC=$mc MEGAMOE_BENCH_ONLY=30B timeout 100 ./layer --bench > $OUT/layer_30B_mc$mc.txt 2>&1; echo "== layer 30B MC=$mc rc $? at $(el) s"
  grep -hE "RESULT.*(forward\+backward \(z saved\)|forward\+backward \(z saved, bf16|megamoe forward, two)" $OUT/layer_30B_mc$mc.txt | cut -c1-230
  [ $(el) -gt 230 ] && break
done
echo "total $(el) s"

#!/usr/bin/env bash
# Seventeenth session, call 3: the cooperative kernels without the wgmma of a warpgroup whose 64 rows are all past
# the expert's end (a ragged last m-tile). Call 2 found the 30B GEMM1 tensor-pipe bound (88% busy, ragged and
# uniform alike, ragged 6.8% more cycles: the dead rows' MMAs). Predicted: -1..-3% on grouped_gemm_bf16 /
# bt_bf16 / swiglu_mv per launch (less if L2 cannot feed a single warpgroup's doubled rate), bitwise unchanged.
# The fourth session's try of this (branch inside the k-loop: serialised; around the k-loop: mixed) was judged in
# the power-capped gemm bench; this one by ncu per launch, base and new alternating twice.
# Binaries: .dev/b1/base (main 9adfa95: gemm, layer), .dev/b3 (new: grouped_gemm, layer_forward, layer), stripped.
set -uo pipefail
cd "$(dirname "$0")"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for t in grouped_gemm layer_forward; do
  timeout 150 b3/$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/$t.txt)"
  grep -E "FAILED|panicked" $OUT/$t.txt | cut -c1-300 | head -6
done
summ() { python3 - "$1" <<'PY'
import csv,sys,collections
r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]
h=r[0]; d=collections.defaultdict(list)
for x in r[1:]: d[x[h.index('Kernel Name')][:40]].append(float(x[h.index('Metric Value')].replace(',',''))/1000)
for k,v in sorted(d.items()): v=sorted(v); print(f"  {k:28s} n={len(v):2d} " + " ".join(f"{u:.0f}" for u in v))
PY
}
for round in 1 2; do
  for v in b1/base b3; do
    MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 120 ncu --clock-control none -k regex:"^grouped_gemm_(bf16|bt_bf16|swiglu_mv)$" \
      --launch-count 30 --metrics gpu__time_duration.sum --csv $v/layer --bench > $OUT/ncu_${round}_${v#*/}.csv 2> $OUT/ncu_${round}_${v#*/}.err
    echo "== ncu 30B round $round $v rc $? at $(el) s"; summ $OUT/ncu_${round}_${v#*/}.csv
  done
done
for v in b1/base b3; do
  [ $(el) -gt 420 ] && break
  MEGAMOE_BENCH_ONLY=235B MEGAMOE_BENCH_REPS=1 timeout 120 ncu --clock-control none -k regex:"^grouped_gemm_(bf16|bt_bf16|swiglu_mv)$" \
    --launch-count 12 --metrics gpu__time_duration.sum --csv $v/layer --bench > $OUT/ncu_235_${v#*/}.csv 2> $OUT/ncu_235_${v#*/}.err
  echo "== ncu 235B $v rc $? at $(el) s"; summ $OUT/ncu_235_${v#*/}.csv
done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the eighteenth session (not run): two changes to the `_ew` dh + SwiGLU backward, alone and together.
#   A = docs/wip/dswiglu-ew-l2-evict-first.patch: the epilogue's z loads and dz / s h stores with an L2 evict-first
#       policy, so the ring's operands (reused across tiles) stay in L2 (the consumers wait on the ring ~32% of their
#       samples, eighteenth session call 3). Predicted 767-770 -> ~700-740 us under ncu at 30B, DRAM below 54%.
#   B = docs/wip/dswiglu-ew-elem.patch: the SwiGLU backward per element with one multiply fewer (dg = (s dh u)
#       (sg + silu (1 - sg))): the epilogue's step 975 -> 900 SASS instructions (its warps are ~98% busy, so
#       predicted a few % on the kernel). Values change by rounding only.
# Build (~2 min each, incremental): for v in base A B AB: apply the patches of v to main (`git apply`), `cargo bench
# --bench layer --no-run`, `cargo bench --bench gemm --no-run`, and for AB also `cargo test --test grouped_gemm
# --no-run`; copy the executables (target/release/deps/layer-*, gemm-*, target/debug/deps/grouped_gemm-*, not the
# .d files) to .dev/bN/$v; `git checkout kernels-gpu` between. `strip .dev/bN/*/*`; this file as .dev/call.sh with
# bN replaced; carry .dev/bN and .dev/call.sh. One call, ~6 min. Land the best (if faster than base by more than the
# spread) after its tests pass: grouped_gemm here; then layer_backward on the next call.
set -uo pipefail
cd "$(dirname "$0")/bN"
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
timeout 90 AB/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm_AB.txt 2>&1
echo "== grouped_gemm (A + B) rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm_AB.txt)"
grep -E "FAILED|panicked" $OUT/r/grouped_gemm_AB.txt | cut -c1-300 | head -6
k=0
for v in base A B AB base AB; do
  [ $(el) -gt 330 ] && break
  k=$((k + 1))
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 4 --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv $v/layer --bench > $OUT/r/ncu_${k}_$v.csv 2> $OUT/r/ncu_${k}_$v.err
  echo "== ncu $v rc $? at $(el) s"; summ $OUT/r/ncu_${k}_$v.csv
done
for v in base AB base AB; do
  [ $(el) -gt 480 ] && break
  MEGAMOE_BENCH_ONLY=30B timeout 60 $v/gemm --bench >> $OUT/r/gemm_$v.txt 2>&1
  echo "== gemm 30B $v rc $? at $(el) s"
  grep "SwiGLU backward" $OUT/r/gemm_$v.txt | tail -2 | sed -E "s/.*(RESULT gemm[-a-z]*) .*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/\1 \2 \3 \4/"
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the eighteenth session (not run): two changes to the `_ew` dh + SwiGLU backward, alone and together.
#   A = docs/wip/dswiglu-ew-l2-evict-first.patch: the epilogue's z loads and dz / s h stores with an L2 evict-first
#       policy, so the ring's operands (reused across tiles) stay in L2 (the consumers wait on the ring ~32% of their
#       samples, eighteenth session call 3). Predicted 767-770 -> ~700-740 us under ncu at 30B, DRAM below 54%;
#       but the kernel's DRAM traffic is already about its compulsory bytes (~2 GB), and the policy costs the
#       epilogue's step 935 -> 975 SASS instructions (its address descriptors per access): expect little.
#   B = docs/wip/dswiglu-ew-elem.patch: the SwiGLU backward per element with one multiply fewer (dg = (s dh u)
#       (sg + silu (1 - sg))): the epilogue's step 935 -> 900 SASS instructions (its warps are ~98% busy, so
#       predicted a few % on the kernel). Values change by rounding only.
# Built already (eighteenth session, on this machine, from main 24cbc79 + the patches): .dev/b9/{base,A,B,AB}, each
# binary stripped and gzipped (7.7 MB -> 1.5 MB: the carry limit is 64 MiB), and .dev/call-next.sh = this file
# with bN = b9. If .dev/b9 is gone or main's kernels changed since: for v in base A B AB apply v's patches to main
# (`git apply`), `cargo bench --bench layer --no-run`, `--bench gemm` (base, AB), `cargo test --test grouped_gemm
# --no-run` and `--test layer_backward` (AB), `--test fp8` (base); copy the executables (target/{release,debug}/deps/,
# not the .d files) to .dev/b9/$v, strip, gzip; `git checkout kernels-gpu` between.
# Call 1: `bash .dev/call-next.sh` with carry [".dev/b9", ".dev/call-next.sh"] (~6 min): the fp8 tests with the new
# default SwiGLU-backward kernel (NOTES "Next session" 0b), grouped_gemm's tests with A + B, base / A / B / A + B
# under ncu, the gemm bench base against A + B. Call 2, if a variant lands: `PART=b` runs layer_backward with A + B.
set -uo pipefail
cd "$(dirname "$0")/b9"
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
if [ "${PART:-a}" = b ]; then
  timeout 280 AB/layer_backward --include-ignored --test-threads=1 > $OUT/layer_backward_AB.txt 2>&1
  echo "== layer_backward (A + B) rc $? at $(el) s: $(grep 'test result' $OUT/layer_backward_AB.txt)"
  grep -E "FAILED|panicked" $OUT/layer_backward_AB.txt | cut -c1-300 | head -6
  exit 0
fi
timeout 150 base/fp8 --include-ignored --test-threads=1 > $OUT/r/fp8_base.txt 2>&1
echo "== fp8 (main, the _ew default) rc $? at $(el) s: $(grep 'test result' $OUT/r/fp8_base.txt)"
grep -E "FAILED|panicked" $OUT/r/fp8_base.txt | cut -c1-300 | head -6
timeout 90 AB/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm_AB.txt 2>&1
echo "== grouped_gemm (A + B) rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm_AB.txt)"
grep -E "FAILED|panicked" $OUT/r/grouped_gemm_AB.txt | cut -c1-300 | head -6
k=0
for v in base A B AB base AB; do
  [ $(el) -gt 380 ] && break
  k=$((k + 1))
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 4 --metrics gpu__time_duration.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv $v/layer --bench > $OUT/r/ncu_${k}_$v.csv 2> $OUT/r/ncu_${k}_$v.err
  echo "== ncu $v rc $? at $(el) s"; summ $OUT/r/ncu_${k}_$v.csv
done
for v in base AB base AB; do
  [ $(el) -gt 500 ] && break
  MEGAMOE_BENCH_ONLY=30B timeout 60 $v/gemm --bench >> $OUT/r/gemm_$v.txt 2>&1
  echo "== gemm 30B $v rc $? at $(el) s"
  grep "SwiGLU backward" $OUT/r/gemm_$v.txt | tail -2 | sed -E "s/.*(RESULT gemm[-a-z]*) .*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/\1 \2 \3 \4/"
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

#!/usr/bin/env bash
# Run as call 1 of the twenty-first session (2026-12-04e): results in docs/RESULTS.md, raw docs/bench-2026-12-04e-call1-*.
# Prepared in the twentieth session (not run): docs/wip/swiglu-ew7.patch, GEMM1 + SwiGLU by epilogue warps
# (`grouped_gemm_swiglu_ew7`, `_ew7_mv`; `MEGAMOE_SWIGLU=ew7`): 4 warpgroups, 128 x 192 tiles of z (96 gate + 96 up
# columns, 96 of h), the consumers hand the bf16 z tile to seven (or, with the overlapped gather, four) epilogue
# warps that store z and h. The patch also makes every GEMM1 epilogue compute h from z rounded to bf16 (`swiglu_h`),
# so the kernels agree bit for bit (and with the backward's recompute from z).
# Predicted: GEMM1 + SwiGLU at 30B 0.88 -> 0.90-0.93 of cuBLAS alternating (the dh kernel's hand-off ran its main
# loop at 558 us where the plain dh GEMM takes 604; GEMM1's epilogue traffic, 600 MB, is light beside its 1.1 ms
# main loop); doubt: 192-column tiles read ~11% more operand bytes per FLOP and GEMM1 is tensor-bound (88%).
# Also measures the cost of `swiglu_h` in the cooperative kernels (sw coop against base).
# Binaries (built in the twentieth session): .dev/b23/sw = main 7295afe + the patch (since regenerated onto 628d815: imports only) (layer, gemm; grouped_gemm,
# layer_forward, layer_backward, ep, graph), .dev/b23/base = main 7295afe (layer, gemm). If gone: `git apply
# docs/wip/swiglu-ew7.patch`, BDIR=.dev/b23 bash docs/calls/2026-12-04c-build.sh sw grouped_gemm layer_forward
# layer_backward ep graph, `git checkout .` (and remove the new kernel file), then the same with `base` and no tests.
# Call A: command `bash docs/calls/next-swiglu-ew7-a.sh`, carry [".dev/b23"] (~6 min); call B: next-swiglu-ew7-b.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b23/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
timeout 150 b23/sw/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"
grep -E "FAILED|panicked|bitwise the cooperative" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -8
# ncu at 30B, the layer's GEMM1 + SwiGLU (forward: the overlapped-gather `_mv` kernels; the recompute too)
for v in base:coop sw:coop sw:ew7 base2:coop; do
  name=${v%%:*}; sw=${v##*:}; b=b23/sw/layer; case $name in base*) b=b23/base/layer;; esac
  MEGAMOE_SWIGLU=$sw MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_swiglu \
    --launch-count 3 --metrics gpu__time_duration.sum,sm__inst_executed.avg.per_cycle_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv $b --bench > $OUT/r/ncu_${name}_$sw.csv 2> $OUT/r/ncu_${name}_$sw.err
  echo "== ncu GEMM1 $name MEGAMOE_SWIGLU=$sw rc $? at $(el) s"
  python3 -c "import csv,sys; r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]; h=r[0]; [print('  ',x[h.index('Kernel Name')][:30],x[h.index('Metric Name')][:40],x[h.index('Metric Value')]) for x in r[1:]]" $OUT/r/ncu_${name}_$sw.csv
done
# the gemm bench alternating with cuBLAS: 30B coop / ew7 twice, base once; 235B coop / ew7
for v in base:coop sw:coop sw:ew7 sw:coop sw:ew7; do
  name=${v%%:*}; sw=${v##*:}
  MEGAMOE_SWIGLU=$sw MEGAMOE_BENCH_ONLY=30B timeout 60 b23/$name/gemm --bench > $OUT/r/gemm_30B_${name}_${sw}_$(el).txt 2>&1
  echo "== gemm 30B $name $sw rc $? at $(el) s"
  grep -hE "RESULT gemm-alternating .*GEMM1" $OUT/r/gemm_30B_${name}_${sw}_*.txt | tail -3 | sed -E "s/.*fwd (GEMM1[^(]*(\([^)]*\))?).*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
done
for sw in coop ew7; do
  MEGAMOE_SWIGLU=$sw MEGAMOE_BENCH_ONLY=235B timeout 80 b23/sw/gemm --bench > $OUT/r/gemm_235B_$sw.txt 2>&1
  echo "== gemm 235B $sw rc $? at $(el) s"
  grep -E "RESULT gemm-alternating .*GEMM1" $OUT/r/gemm_235B_$sw.txt | sed -E "s/.*fwd (GEMM1[^(]*(\([^)]*\))?).*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
done
MEGAMOE_SWIGLU=ew7 timeout 90 b23/sw/ep --include-ignored --test-threads=1 > $OUT/r/ep_ew7.txt 2>&1
echo "== ep (MEGAMOE_SWIGLU=ew7) rc $? at $(el) s: $(grep 'test result' $OUT/r/ep_ew7.txt)"
grep -E "FAILED|panicked" $OUT/r/ep_ew7.txt | cut -c1-300 | head -6
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

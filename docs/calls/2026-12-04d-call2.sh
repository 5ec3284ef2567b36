#!/usr/bin/env bash
# Twentieth session, call 2: the 4-warpgroup SwiGLU backward `grouped_gemm_bt_dswiglu_ew7` (128 x 192 tiles, seven
# epilogue warps, 4-stage ring of 40 KiB, 128 registers for every thread, no spills) against `_ew` (128 x 256, three
# epilogue warps). Predicted: 758 -> ~650-690 us under ncu at 30B (0.75 -> ~0.82-0.87 of cuBLAS alternating):
# the nineteenth session's probes put the time in the epilogue warps' row count (one warp a scheduler, latency-
# bound), and seven warps each take 19-20 rows of 128 against 43; the 192-column main loop reads ~11% more operand
# bytes per FLOP from L2 (the doubt).
# Binaries: .dev/b20/ew7 (this tree), .dev/b11/base (main 63a59a1). Carry [".dev/b20", ".dev/b11/base"].
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b20/ew7/*.gz b11/base/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
timeout 150 b20/ew7/grouped_gemm --include-ignored --test-threads=1 > $OUT/r/grouped_gemm.txt 2>&1
echo "== grouped_gemm (ew and ew7 against the reference and ping-pong) rc $? at $(el) s: $(grep 'test result' $OUT/r/grouped_gemm.txt)"
grep -E "FAILED|panicked" $OUT/r/grouped_gemm.txt | cut -c1-300 | head -6
# ncu at 30B: main's _ew, this tree's _ew, _ew7, main's _ew again
for v in base:ew ew:ew ew7:ew7 base2:ew; do
  name=${v%%:*}; dsw=${v##*:}; b=b20/ew7/layer; case $name in base*) b=b11/base/layer;; esac
  MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 3 --metrics gpu__time_duration.sum,sm__inst_executed.avg.per_cycle_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed \
    --csv $b --bench > $OUT/r/ncu_$name.csv 2> $OUT/r/ncu_$name.err
  echo "== ncu dswiglu $name (MEGAMOE_DSW=$dsw) rc $? at $(el) s"
  python3 -c "import csv,sys; r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]; h=r[0]; [print('  ',x[h.index('Kernel Name')][:30],x[h.index('Metric Name')][:40],x[h.index('Metric Value')]) for x in r[1:]]" $OUT/r/ncu_$name.csv
done
# the gemm bench at 30B, alternating with cuBLAS: ew / ew7 twice; 235B once each
for round in 1 2; do
  for dsw in ew ew7; do
    MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=30B timeout 60 b20/ew7/gemm --bench > $OUT/r/gemm_30B_${dsw}_$round.txt 2>&1
    echo "== gemm 30B $dsw rc $? at $(el) s"
    grep -E "RESULT gemm(-alternating)? .*dh \+ SwiGLU" $OUT/r/gemm_30B_${dsw}_$round.txt | sed -E "s/.*(gemm-alternating|gemm) .*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2 \3 \4/"
  done
done
for dsw in ew ew7; do
  MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=235B timeout 80 b20/ew7/gemm --bench > $OUT/r/gemm_235B_$dsw.txt 2>&1
  echo "== gemm 235B $dsw rc $? at $(el) s"
  grep -E "RESULT gemm(-alternating)? .*dh \+ SwiGLU" $OUT/r/gemm_235B_$dsw.txt | sed -E "s/.*(gemm-alternating|gemm) .*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2 \3 \4/"
done
MEGAMOE_DSW=ew7 timeout 90 b20/ew7/ep --include-ignored --test-threads=1 > $OUT/r/ep_ew7.txt 2>&1
echo "== ep (MEGAMOE_DSW=ew7) rc $? at $(el) s: $(grep 'test result' $OUT/r/ep_ew7.txt)"
grep -E "FAILED|panicked" $OUT/r/ep_ew7.txt | cut -c1-300 | head -6
MEGAMOE_DSW=ew7 timeout 200 b20/ew7/layer_backward --include-ignored --test-threads=1 > $OUT/r/layer_backward_ew7.txt 2>&1
echo "== layer_backward (MEGAMOE_DSW=ew7) rc $? at $(el) s: $(grep 'test result' $OUT/r/layer_backward_ew7.txt)"
grep -E "FAILED|panicked" $OUT/r/layer_backward_ew7.txt | cut -c1-300 | head -6
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

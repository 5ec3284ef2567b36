#!/usr/bin/env bash
# Twentieth session, call 3: what bounds `_ew7` (probes), and `_ew7` against `_ew` in the layer.
# Probes (one-line edits of grouped_gemm_dswiglu_ew.rs, results wrong by design): P1 = the epilogue warps skip
# their rows (the main loop alone, either kernel by MEGAMOE_DSW); P2 = `_ew7`'s consumers issue no wgmma (the
# seven epilogue warps and the loads alone). Then the layer bench (this tree: its new line times the z-saved,
# bf16-gradient forward + backward with `_ew7` alternating with the default `_ew`) at 30B and 235B.
# Binaries: .dev/b21/{ew7,p1,p2}. Carry [".dev/b21"].
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b21/*/*.gz; do [ -f $f ] && gunzip -f $f && chmod +x ${f%.gz}; done
for v in p1:ew7 p1:ew p2:ew7; do
  name=${v%%:*}; dsw=${v##*:}
  MEGAMOE_DSW=$dsw MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu_ew \
    --launch-count 3 --metrics gpu__time_duration.sum,sm__inst_executed.avg.per_cycle_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed \
    --csv b21/$name/layer --bench > $OUT/r/ncu_${name}_$dsw.csv 2> $OUT/r/ncu_${name}_$dsw.err
  echo "== ncu $name MEGAMOE_DSW=$dsw rc $? at $(el) s"
  python3 -c "import csv,sys; r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]; h=r[0]; [print('  ',x[h.index('Kernel Name')][:30],x[h.index('Metric Name')][:40],x[h.index('Metric Value')]) for x in r[1:]]" $OUT/r/ncu_${name}_$dsw.csv
done
for shape in 30B 235B; do
  MEGAMOE_BENCH_ONLY=$shape timeout 240 b21/ew7/layer --bench > $OUT/r/layer_$shape.txt 2>&1
  echo "== layer $shape rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)|FAILED" $OUT/r/layer_$shape.txt | cut -c1-260
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

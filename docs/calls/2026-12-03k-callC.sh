#!/usr/bin/env bash
# Session 22 call C: grouped_gemm_bt_dswiglu with a 5-stage ring (z staged in 64 x 32 boxes, 3 slots a warpgroup)
# against main (828a74b, 4 stages, 64 x 64 boxes, 2 slots). Call B's SASS profile: the consumers' main loop waits
# on full stages 41% of its time while the producer waits on empty ones: operands in flight too few, or L2 -> SM
# delivery. Predicted: dswiglu 790-874 -> 700-780 us at 30B if the ring depth bounds it, unchanged if L2 does.
set -uo pipefail
cd "$(dirname "$0")/bC"
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
for t in grouped_gemm ep; do
  timeout 100 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1; echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/$t.txt)"
  grep -E "FAILED|panicked" $OUT/$t.txt | cut -c1-300 | head -6
done
timeout 150 ./layer_backward --include-ignored --test-threads=1 --exact ragged_shape ragged_shape_saved_z small_recompute small_saved_z half_the_experts_empty one_token qwen3_30b_a3b_t1024_half_empty every_slot_on_one_expert > $OUT/layer_backward.txt 2>&1
echo "== layer_backward rc $? at $(el) s: $(grep 'test result' $OUT/layer_backward.txt)"; grep -E "FAILED|panicked" $OUT/layer_backward.txt | cut -c1-300 | head -6
for v in . base; do
  n=$(basename $(realpath $v))
  MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_REPS=1 timeout 100 ncu --clock-control none -k regex:grouped_gemm_bt_dswiglu --launch-count 8 \
    --metrics gpu__time_duration.sum,lts__t_sectors_op_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed --csv $v/layer --bench > $OUT/ncu_dsw_$n.csv 2> $OUT/ncu_dsw_$n.err
  echo "== ncu dswiglu $n rc $? at $(el) s"
  python3 - $OUT/ncu_dsw_$n.csv <<'PY'
import csv,sys,collections
r=[x for x in csv.reader(open(sys.argv[1])) if len(x)>10]
h=r[0]; d=collections.defaultdict(list)
for x in r[1:]: d[x[h.index('Metric Name')]].append(x[h.index('Metric Value')].replace(',',''))
for k,v in d.items(): print(' ', k, ' '.join(v))
PY
done
i=0; for v in . base . base; do
  n=$(basename $(realpath $v))_$i; i=$((i+1))
  MEGAMOE_BENCH_ONLY=30B timeout 100 $v/layer --bench > $OUT/layer_30B_$n.txt 2>&1; echo "== layer 30B $n rc $? at $(el) s"
  grep -hE "RESULT.*(forward\+backward \(z saved\)|forward\+backward \(z saved, bf16|Fp8Backward::Dx )" $OUT/layer_30B_$n.txt | cut -c1-230
  [ $(el) -gt 470 ] && break
done
echo "total $(el) s"

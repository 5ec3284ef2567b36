#!/usr/bin/env bash
# Thirty-first session (not run). Why the 235B M-grouped GEMMs fell so far on the H100 of 2026-12-05f (alternating
# with cuBLAS: GEMM1 plain 0.75, GEMM1 + SwiGLU 0.63 / 0.75, GEMM2 0.76, dx 0.66, against 0.87-0.96 on the H200
# before; at 30B the same call gave 0.87-0.95): ours 0.78 of cuBLAS's own batched GEMM at 235B GEMM1 where 30B gives
# 0.90. The H100's HBM is ~30% slower than the H200's, so the suspect is bytes: the weights (3.2 GB of W1 at 235B,
# 25 MB an expert, ~1.4 experts' B tiles in flight over 132 CTAs, the 50 MB L2 nearly full) read from HBM more
# than once. (1) The gemm bench at 235B soaked (MEGAMOE_SOAK=3) with nvidia-smi: joules, clock and power of each
# GEMM, ours and cuBLAS dense (does ours draw less than the cap, i.e. wait on memory?). (2) ncu (base clocks) of
# three launches each, GEMM1 plain at 235B then at 30B: ours (`grouped_gemm_bf16`, its first launches are GEMM1's)
# and cuBLAS's dense GEMM (the first nvjet launches): DRAM bytes read / written, L2 hit rate and bytes, the tensor
# pipe's duty. Predicted if the suspect holds: at 235B ours reads >= 2x the 5.1 GB floor (B 3.2 + A 1.07 + C 0.8)
# from DRAM where cuBLAS reads ~1x, and our 235B windows draw < 690 W; at 30B both near their floors. If not, the
# gap is elsewhere (the tensor duty will say). Binaries .dev/b50 (main b79ce99). Command `bash docs/calls/next-235b.sh`,
# carry [".dev/b50"]; ~4 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b50
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b50/main
smi_start
MEGAMOE_SOAK=3 MEGAMOE_BENCH_ONLY=235B timeout $(to 200 300) $B/gemm --bench > $OUT/r/gemm_235b.txt 2>&1
echo "== gemm 235B soak rc $? at $(el) s"
smi_stop
alt_of gemm_235b
energy_of gemm_235b; cat $OUT/r/energy_gemm_235b.txt 2>/dev/null | cut -c1-200
want="gpu__time_duration.sum dram__bytes_read.sum dram__bytes_write.sum lts__t_bytes.sum lts__t_sector_hit_rate.pct
sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed
sm__throughput.avg.pct_of_peak_sustained_elapsed launch__grid_size"
m=$(ncu_metrics "$want")
for shape in 235B 30B; do
  for who in ours cublas; do
    k='regex:^grouped_gemm_bf16$'; [ $who = cublas ] && k='regex:nvjet'
    MEGAMOE_BENCH_ONLY=$shape timeout $(to 110 0) ncu -k "$k" --launch-skip 1 --launch-count 3 --metrics "$m" --csv \
      $B/gemm --bench > $OUT/r/ncu_${shape}_$who.csv 2> $OUT/r/ncu_${shape}_$who.err
    echo "== ncu $shape $who rc $? at $(el) s"
  done
done
python3 - $OUT/r <<'P'
import csv, sys, glob, os, collections
for path in sorted(glob.glob(os.path.join(sys.argv[1], "ncu_*.csv"))):
    rows = [x for x in csv.reader(open(path)) if len(x) > 10]
    if not rows: print(os.path.basename(path), "no rows"); continue
    h = rows[0]; i, k, m, v = (h.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Value"))
    by = collections.OrderedDict()
    for x in rows[1:]: by.setdefault(int(x[i]), {"name": x[k]})[x[m]] = x[v]
    print(os.path.basename(path))
    for l in by.values():
        print("  " + l["name"][:48] + " " + " ".join(f"{key.split('.')[0].split('__')[-1][:22]}={val}" for key, val in l.items() if key != "name"))
P
echo "total $(el) s"

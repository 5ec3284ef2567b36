#!/usr/bin/env bash
# Thirty-first session: the smallest form of next-235b.sh's question, for a 260 s budget: ncu (base clocks) of two
# launches of GEMM1 plain at 235B, ours (`grouped_gemm_bf16`) and cuBLAS's dense GEMM (the first nvjet launches):
# DRAM bytes read / written, L2 hit rate. Floor: 5.1 GB (W1 3.2 + x rows 1.07 + C 0.8). Predicted if the weights are
# re-read from HBM: ours >= 2x the floor, cuBLAS ~1x. Command `bash docs/calls/next-235b-ncu.sh`, carry [".dev/b50"];
# ~2 min (bound 200 s).
BOUND=${BOUND:-200}
. "$(dirname "$0")/prelude.sh" b50
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b50/main
m="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_bytes.sum,launch__grid_size"
for who in ours cublas; do
  k='regex:^grouped_gemm_bf16$'; [ $who = cublas ] && k='regex:nvjet'
  MEGAMOE_BENCH_ONLY=235B timeout $(to 90 0) ncu -k "$k" --launch-skip 1 --launch-count 2 --metrics "$m" --csv \
    $B/gemm --bench > $OUT/r/ncu_235B_$who.csv 2> $OUT/r/ncu_235B_$who.err
  echo "== ncu 235B $who rc $? at $(el) s"
  grep -h '"dram__bytes\|"gpu__time\|"lts__t_sector_hit' $OUT/r/ncu_235B_$who.csv | awk -F'","' '{print $5, $(NF-2), $NF}' | cut -c1-160
done
echo "total $(el) s"

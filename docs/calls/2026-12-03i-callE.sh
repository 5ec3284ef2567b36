#!/usr/bin/env bash
# 2026-12-03 (fourteenth session), call E: call D's ncu of the column quantizer: L2 84% busy at 2.2 TB/s, DRAM 45%:
# L2-bound on requests, not bytes (every 16-byte store of codes and of the gathered copy half a 32-byte sector, the
# bar.red search moved ~3%). Now: lane pairs load and copy adjacent chunks (whole sectors), the codes staged in
# shared memory and stored by whole 128-byte lines. Predicted: L2 busy < 60%, DRAM-bound; quantize both 531 / 670
# us -> ~350 / ~450 us; the FP8-wgrad step -300..-400 us (8859 -> ~8500).
set -uo pipefail
cd "$(dirname "$0")/bE"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 100 ./fp8 --include-ignored --test-threads=1 --nocapture cols_g backward_fp8 > $OUT/fp8.txt 2>&1; echo "== fp8 (quantizer, backward_fp8) rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked" $OUT/fp8.txt | cut -c1-300 | head -6
MEGAMOE_BENCH_FP8_WGRAD=only MEGAMOE_BENCH_ONLY=30B timeout 120 ./fp8_bench --bench > $OUT/fp8_bench_30B.txt 2>&1; echo "== fp8 bench 30B rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*(K-grouped)|FAIL" $OUT/fp8_bench_30B.txt | cut -c1-330
MEGAMOE_BENCH_FP8_WGRAD=only MEGAMOE_BENCH_ONLY=30B timeout 200 ncu --clock-control none -k regex:"^quantize_fp8_cols_grouped$" --launch-skip 4 --launch-count 3 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
  -o $OUT/prof ./fp8_bench --bench > $OUT/ncu_run.txt 2>&1; echo "== ncu rc $? at $(( $(date +%s) - start )) s"
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
grep -E "quantize_fp8|Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Mem Busy|Max Bandwidth" $OUT/ncu_details.txt | head -60
ncu --import $OUT/prof.ncu-rep --page raw --csv --metrics smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__average_warp_latency_issue_stalled_lg_throttle,smsp__average_warp_latency_issue_stalled_mio_throttle,smsp__average_warp_latency_issue_stalled_short_scoreboard,smsp__average_warp_latency_issue_stalled_drain,dram__bytes_read.sum.per_second,dram__bytes_write.sum.per_second > $OUT/ncu_raw.csv 2>&1
cut -c1-600 $OUT/ncu_raw.csv | head -6
MEGAMOE_BENCH_ONLY=30B timeout 200 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*FP8" $OUT/layer.txt | cut -c1-420 | head -4
echo "total $(( $(date +%s) - start )) s"

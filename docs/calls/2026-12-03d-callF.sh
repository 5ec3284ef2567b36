#!/usr/bin/env bash
# Session 2026-12-03 (ninth), call F (main ee3b8ba): why 30B dW2 runs 20% slower per tile than dW1 (same tile
# shape and K): ncu of grouped_wgrad_bf16 on dW2 (launch 6) and dW1 (launch 29) in the gemm bench; then the
# 30B and 235B layers against torch._grouped_mm again (fwd+bwd with bf16 weight gradients).
set -uo pipefail
cd "$(dirname "$0")/bF"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
for skip in 5 28; do
  t0=$(date +%s)
  MEGAMOE_BENCH_ONLY=30B timeout 120 ncu --clock-control none -k regex:grouped_wgrad_bf16 --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex.sum \
    ./gemm --bench > $OUT/ncu_$skip.txt 2>&1
  echo "== ncu skip $skip rc $? in $(( $(date +%s) - t0 )) s"
  grep -E 'grouped_wgrad_bf16 \(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|L2 Hit Rate|Eligible Warps|No Eligible|dram__bytes|lts__t_sector_hit|hmma|lts__t_sectors_srcunit|Warp Cycles Per Issued|Stall' $OUT/ncu_$skip.txt | head -30
done
t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B timeout 60 ./layer --bench > $OUT/layer_30b.txt 2>&1; echo "== layer 30B rc $? in $(( $(date +%s) - t0 )) s"
grep RESULT $OUT/layer_30b.txt | grep -E 'forward Qwen|z saved' | cut -c1-300
t0=$(date +%s); MEGAMOE_BENCH_ONLY=30B MEGAMOE_TORCH_LOOP=0 PYTHONUNBUFFERED=1 timeout 90 python3 torch_layer.py > $OUT/torch_30b.txt 2>&1; echo "== torch 30B rc $? in $(( $(date +%s) - t0 )) s"; grep RESULT $OUT/torch_30b.txt | cut -c1-150
late 380 || { t0=$(date +%s); MEGAMOE_BENCH_ONLY=235B timeout 100 ./layer --bench > $OUT/layer_235b.txt 2>&1; echo "== layer 235B rc $? in $(( $(date +%s) - t0 )) s"; grep RESULT $OUT/layer_235b.txt | grep -E 'forward Qwen|z saved' | cut -c1-300; }
late 470 || { t0=$(date +%s); MEGAMOE_BENCH_ONLY=235B MEGAMOE_TORCH_LOOP=0 PYTHONUNBUFFERED=1 timeout 100 python3 torch_layer.py > $OUT/torch_235b.txt 2>&1; echo "== torch 235B rc $? in $(( $(date +%s) - t0 )) s"; grep RESULT $OUT/torch_235b.txt | cut -c1-150; }
echo "total $(( $(date +%s) - start )) s"

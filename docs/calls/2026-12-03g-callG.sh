#!/usr/bin/env bash
# 2026-12-03 (twelfth session), call G: what bounds the FP8 GEMM (0.42 of the datasheet peak, 0.69 of cuBLASLt's
# dense FP8 on 30B GEMM1), and the 128 x 256 tile. (1) tests/fp8.rs (new: the wide kernel bitwise the 128 one,
# alone and in the layer). (2) the FP8 bench at 30B: the staged kernel, a probe (its main loop without the
# per-block promotion: near the staged -> the tile / pipeline bounds it; far faster -> the promotion), and
# grouped_gemm_fp8w (128 x 256, predicted +10-20% if L2 traffic bounds the 128 x 128 kernel). (3) the 30B layer
# bench (FP8 forward with GEMM2 wide against 128, alternating). (4) ncu --set full of staged, probe and wide.
set -uo pipefail
cd "$(dirname "$0")/bG"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 120 ./fp8 --include-ignored --test-threads=1 > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked" $OUT/fp8.txt | head -5
MEGAMOE_BENCH_ONLY=30B timeout 90 ./fp8_bench --bench > $OUT/fp8_bench.txt 2>&1; echo "== fp8 bench rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*(GEMM1 \(plain\)|GEMM2)" $OUT/fp8_bench.txt | sed 's/| quantize A.*all written: true//' | cut -c1-480
MEGAMOE_BENCH_ONLY=30B timeout 90 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $? at $(( $(date +%s) - start )) s"
grep RESULT $OUT/layer.txt | grep -E "FP8" | cut -c1-300
MEGAMOE_BENCH_ONLY=30B timeout 200 ncu --clock-control none -k regex:"^grouped_gemm_fp8(_probe|w)?$" --launch-skip 9 --launch-count 3 \
  --set full --import-source no -o $OUT/prof ./fp8_bench --bench > $OUT/ncu_run.txt 2>&1; echo "== ncu rc $? at $(( $(date +%s) - start )) s"
tail -2 $OUT/ncu_run.txt
ncu --import $OUT/prof.ncu-rep --page details > $OUT/ncu_details.txt 2>&1
ncu --import $OUT/prof.ncu-rep --page source --print-source sass --csv > $OUT/ncu_sass.csv 2>&1
gzip $OUT/ncu_sass.csv 2>/dev/null; rm -f $OUT/prof.ncu-rep
grep -E "^  [a-z_0-9]+ \(|Duration|SM Frequency|L2 Cache Throughput|Compute \(SM\)|Issue Slots|Eligible Warps" $OUT/ncu_details.txt | head -40
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# 2026-12-03 (fourteenth session), call A: main 8f99da5 (review commits of the thirteenth session not yet run on the
# GPU: PreparedFp8Launch, fp8b B-scale pointer once per tile). tests/fp8.rs in full, the FP8 weight-gradient bench
# at 30B, then the per-GEMM bench at 30B (issue 4's ratios, same call). Predicted: fp8 all pass; wgrad as call B
# (fp8b 438 / 996 us, +-3%); gemm ratios as the twelfth session's (+-0.05).
set -uo pipefail
cd "$(dirname "$0")/bA"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 200 ./fp8 --include-ignored --test-threads=1 > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked" $OUT/fp8.txt | head -10
MEGAMOE_BENCH_FP8_WGRAD=only MEGAMOE_BENCH_ONLY=30B timeout 120 ./fp8_bench --bench > $OUT/fp8_bench_30B.txt 2>&1; echo "== fp8 bench 30B rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*(K-grouped)|FAIL" $OUT/fp8_bench_30B.txt | cut -c1-400
MEGAMOE_BENCH_ONLY=30B timeout 200 ./gemm --bench > $OUT/gemm_30B.txt 2>&1; echo "== gemm 30B rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT|FAIL" $OUT/gemm_30B.txt | cut -c1-300
echo "total $(( $(date +%s) - start )) s"

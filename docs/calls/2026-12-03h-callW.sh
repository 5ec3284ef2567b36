#!/usr/bin/env bash
# Prepared 2026-12-03 (twelfth session), not run (the device budget was spent). Setup here: on a branch from main,
# `git am docs/wip/fp8-wgrad.patch`, `cargo xtask gpu-bundle .dev/bundle`; copy fp8 and fp8_bench into .dev/bW, this
# script to .dev/callW.sh; carry [".dev/bW", ".dev/callW.sh"]. ~150 s.
# 1. tests/fp8.rs: quantize_cols_grouped_* (bitwise the CPU reference), wgrad_fp8_* (against the dequantized f64
#    product; predicted ~1e-5 for f32 C, ~2e-3 for bf16), and every earlier FP8 test.
# 2. MEGAMOE_BENCH_FP8_WGRAD=1 ./fp8_bench --bench at 30B: dW2 and dW1 in FP8 against the bf16 weight gradients
#    (predicted ~1.2-1.3x; the quantization alone ~2.5 GB moved at 30B: a net loss as a separate pass).
set -uo pipefail
cd "$(dirname "$0")/bW"
start=$(date +%s)
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 150 ./fp8 --include-ignored --test-threads=1 --nocapture > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked|FP8 wgrad" $OUT/fp8.txt | head -12
MEGAMOE_BENCH_FP8_WGRAD=1 MEGAMOE_BENCH_ONLY=30B timeout 150 ./fp8_bench --bench > $OUT/fp8_bench.txt 2>&1; echo "== fp8 bench rc $? at $(( $(date +%s) - start )) s"
grep -E "RESULT.*(K-grouped|layer)|FAIL" $OUT/fp8_bench.txt | cut -c1-330
echo "total $(( $(date +%s) - start )) s"

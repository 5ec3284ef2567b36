#!/usr/bin/env bash
# 2026-12-03 (twelfth session), call H: the 128 x 256 FP8 tiles as the default (GroupedGemmFp8Args::prepare,
# SwigluFp8QArgs::prepare, the layer): tests/fp8.rs, then the layer bench at 30B and 235B (the FP8 forward
# against bf16 and against the 128 x 128 tiles, the FP8 fwd + bwd against bf16).
set -uo pipefail
cd "$(dirname "$0")/bH"
start=$(date +%s)
late() { [ $(( $(date +%s) - start )) -gt $1 ]; }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
timeout 120 ./fp8 --include-ignored --test-threads=1 --nocapture > $OUT/fp8.txt 2>&1; echo "== fp8 rc $? at $(( $(date +%s) - start )) s: $(grep 'test result' $OUT/fp8.txt)"
grep -E "FAILED|panicked|backward_fp8 T" $OUT/fp8.txt | head -5
for shape in 30B 235B; do
  late 140 && break
  MEGAMOE_BENCH_ONLY=$shape timeout 100 ./layer --bench > $OUT/layer_$shape.txt 2>&1; echo "== layer $shape rc $? at $(( $(date +%s) - start )) s"
  grep RESULT $OUT/layer_$shape.txt | grep -E "FP8|forward Qwen" | cut -c1-300
done
echo "total $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# Prepared 2026-12-03 (eleventh session), not run (the device budget was spent). Setup here: on a branch from main,
# `git am docs/wip/fp8-dgrad.patch docs/wip/fp8-hq.patch` (in that order), `cargo xtask gpu-bundle .dev/bundle`;
# copy fp8, fp8_bench, torch_fp8.py, layer, torch_layer.py, layer_forward, graph into .dev/bD, this script to .dev/callD.sh; carry [".dev/bD",
# ".dev/callD.sh"]. ~250 s.
# 1. tests/fp8.rs with the patch: quantize_blocks_t bitwise the CPU reference; dx in FP8 with transposed weights
#    against the dequantized f64 product (predicted ~1.7e-3, as the forward GEMMs).
# 2. The Qwen-sized cases of layer_forward and graph that call Z skipped after the route_call refactor.
# 3. (with 1) main's review fixes of 4ed6ada, not yet run: every fp8 test covers them.
# 4. fp8-hq.patch: GEMM1 + SwiGLU quantizing h in its epilogue (`grouped_gemm_fp8_swiglu_q`): bitwise the two
#    kernels in a row (test), the layer's fused and pass outputs bitwise (test); then the FP8 bench's layer lines
#    (fused against the pass, alternating; predicted 30B forward 2091 -> ~1950 us, ~1.15x bf16).
# 5. benches/torch_fp8.py: cuBLASLt's FP8 GEMM (torch._scaled_mm, rowwise scales) on the dense shapes of the
#    forward GEMMs, the ceiling beside fp8_bench's lines (not yet run anywhere).
# 6. If time is left: the 30B layer bench (its new last line: the FP8 forward against the bf16 forward) and
#    torch_layer.py in the same call: the FP8 forward against PyTorch's layer.
set -uo pipefail
cd "$(dirname "$0")/bD"
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
run() { local name=$1; shift; local t0=$(date +%s); "$@" --include-ignored --test-threads=1 > $OUT/$name.txt 2>&1; local rc=$?
  echo "== $name rc $rc in $(( $(date +%s) - t0 )) s: $(grep 'test result' $OUT/$name.txt | tail -1)"; grep -E "FAILED|panicked" $OUT/$name.txt | head -8; }
run fp8 timeout 90 ./fp8 &
run layer_forward timeout 200 ./layer_forward qwen3 &
run graph timeout 200 ./graph qwen3 &
wait
grep -E "rel err" $OUT/fp8.txt | tail -3
timeout 90 ./fp8_bench --bench > $OUT/fp8_bench.txt 2>&1; echo "== fp8 bench rc $?"; grep -E "RESULT.*layer|FAIL" $OUT/fp8_bench.txt | cut -c1-330
timeout 90 python3 torch_fp8.py > $OUT/torch_fp8.txt 2>&1; echo "== torch fp8 rc $?"; grep -E "RESULT|torch " $OUT/torch_fp8.txt | cut -c1-300
MEGAMOE_BENCH_ONLY=30B timeout 120 ./layer --bench > $OUT/layer.txt 2>&1; echo "== layer rc $?"; grep RESULT $OUT/layer.txt | grep -E "forward (FP8 )?Qwen" | cut -c1-250
MEGAMOE_BENCH_ONLY=30B MEGAMOE_TORCH_LOOP=0 timeout 90 python3 torch_layer.py > $OUT/torch.txt 2>&1; echo "== torch rc $?"; grep RESULT $OUT/torch.txt | cut -c1-150

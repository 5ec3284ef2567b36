#!/usr/bin/env bash
# session 24 call 4: the epilogue-warps SwiGLU backward as the default. EP and graph tests with it; the gemm bench
# at 30B (each GEMM alternating with cuBLAS); the 30B layer, PyTorch's layer, the layer again (one call).
set -uo pipefail
cd "$(dirname "$0")/b8"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
for t in ep graph; do
  timeout 100 ./$t --include-ignored --test-threads=1 > $OUT/$t.txt 2>&1
  echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/$t.txt)"; grep -E "FAILED|panicked" $OUT/$t.txt | cut -c1-300 | head -6
done
MEGAMOE_BENCH_ONLY=30B timeout 90 ./gemm --bench > $OUT/gemm_30B.txt 2>&1; echo "== gemm 30B rc $? at $(el) s"
grep "^RESULT gemm-alternating" $OUT/gemm_30B.txt | sed -E "s/.*A3B (.*) M=.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/\1 \2 \3 \4/" | cut -c1-150
run_ours() {
  MEGAMOE_BENCH_ONLY=30B timeout 70 ./layer --bench > $OUT/layer_$1.txt 2>&1; echo "== megamoe $1 rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/layer_$1.txt | cut -c1-150
}
run_ours 1
MEGAMOE_BENCH_ONLY=30B MEGAMOE_TORCH_LOOP=0 timeout 90 python3 ../../benches/torch_layer.py > $OUT/torch.txt 2>&1
echo "== torch rc $? at $(el) s"; grep -E "RESULT|grouped" $OUT/torch.txt | cut -c1-160 | head -6
[ $(el) -lt 380 ] && run_ours 2
echo "total $(el) s"

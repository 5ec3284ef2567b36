#!/usr/bin/env bash
# Seventeenth session, call 5: issue 4's layer targets in one call at 30B (forward >= 2.5x torch._grouped_mm and
# >= 500 TFLOP/s, forward + backward >= 2x): megamoe's layer bench, PyTorch's layer (no per-expert loop), megamoe
# again. Binary: main 9adfa95's layer bench (.dev/b1/base, stripped); benches/torch_layer.py from the tree.
set -uo pipefail
cd "$(dirname "$0")/b1/base"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
run_ours() {
  MEGAMOE_BENCH_ONLY=30B timeout 80 ./layer --bench > $OUT/layer_$1.txt 2>&1; echo "== megamoe $1 rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/layer_$1.txt | cut -c1-150
}
run_ours 1
MEGAMOE_BENCH_ONLY=30B MEGAMOE_TORCH_LOOP=0 timeout 90 python3 ../../../benches/torch_layer.py > $OUT/torch.txt 2>&1
echo "== torch rc $? at $(el) s"; grep -E "RESULT|grouped" $OUT/torch.txt | cut -c1-160 | head -6
[ $(el) -lt 170 ] && run_ours 2
echo "total $(el) s"

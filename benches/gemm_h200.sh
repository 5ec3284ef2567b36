#!/usr/bin/env bash
# One call on the GPU machine: each GEMM of the MoE layer alone, megamoe against cuBLAS's dense GEMM of the same
# total shape (benches/gemm.rs, binary `gemm`), then torch._grouped_mm on the same grouped shapes and routing
# counts (benches/torch_gemm.py), then the unfused dh + SwiGLU backward that the fused kernel replaces (cuBLAS's dh and a
# separate pass, benches/torch_dswiglu.py). Same GPU, same session.
# Usage (from a gpu-bundle folder that holds `gemm`, torch_gemm.py, torch_dswiglu.py and this script):
#   bash gemm_h200.sh [OUT_DIR]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-.}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
# cuBLAS for cudarc (it dlopens libcublas.so or libcublas.so.13): the directories of PyTorch's pip wheels that
# hold libcublas (nvidia/cu13/lib or nvidia/cublas/lib), then the system CUDA's lib64.
libdirs="$(python3 - <<'PY'
import glob, os, site
roots = list(site.getsitepackages()) + [site.getusersitepackages()]
try:
    import nvidia.cublas as m
    roots += [os.path.dirname(os.path.dirname(p)) for p in m.__path__]
except Exception:
    pass
dirs = []
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")):
        if glob.glob(os.path.join(d, "libcublas.so*")) and d not in dirs:
            dirs.append(d)
print(":".join(dirs))
PY
)"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if ls "$d"/libcublas.so* >/dev/null 2>&1; then libdirs="${libdirs:+$libdirs:}$d"; fi
done
echo "libcublas directories: ${libdirs:-none found}"
export LD_LIBRARY_PATH="${libdirs:+$libdirs:}${LD_LIBRARY_PATH:-}"
rc=0
MEGAMOE_GEMM_COUNTS_DIR="$out" "$here/gemm" --bench 2>&1 | tee "$out/gemm_megamoe.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
PYTHONUNBUFFERED=1 python3 "$here/torch_gemm.py" "$out" 2>&1 | tee "$out/gemm_torch.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
PYTHONUNBUFFERED=1 python3 "$here/torch_dswiglu.py" "$out" 2>&1 | tee "$out/gemm_torch_dswiglu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
echo "== summary"
grep -h "RESULT\|FAILED\|NOT AVAILABLE" "$out/gemm_megamoe.txt" "$out/gemm_torch.txt" "$out/gemm_torch_dswiglu.txt"
exit $rc

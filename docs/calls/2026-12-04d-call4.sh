#!/usr/bin/env bash
# Twentieth session, call 4: `_ew7` as the default SwiGLU backward and the cooperative main loop made generic over
# its accumulator (`mainloop_coop::<.., A: Acc>`, same SASS for the other kernels but for register moves): every
# GPU test that runs the engine (grouped_gemm, fp8, graph, layer_forward, layer_backward, ep) with the new default,
# then the gemm bench at 30B (alternating with cuBLAS). Binaries .dev/b22/ew7. Carry [".dev/b22"].
set -uo pipefail
cd "$(dirname "$0")/../../.dev"
s=$(date +%s); el() { echo $(( $(date +%s) - s )); }
libdirs="$(python3 -c 'import glob,site,os; print(":".join(sorted({os.path.dirname(p) for r in site.getsitepackages() for p in glob.glob(os.path.join(r,"nvidia","*","lib","libcublas.so*"))})))')"
export LD_LIBRARY_PATH="$libdirs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/r
for f in b22/ew7/*.gz; do gunzip -f $f && chmod +x ${f%.gz}; done
for t in grouped_gemm fp8 layer_forward ep layer_backward graph; do
  timeout 170 b22/ew7/$t --include-ignored --test-threads=1 > $OUT/r/$t.txt 2>&1
  echo "== $t rc $? at $(el) s: $(grep 'test result' $OUT/r/$t.txt)"
  grep -E "FAILED|panicked" $OUT/r/$t.txt | cut -c1-300 | head -6
done
MEGAMOE_BENCH_ONLY=30B timeout 60 b22/ew7/gemm --bench > $OUT/r/gemm_30B.txt 2>&1
echo "== gemm 30B rc $? at $(el) s"
grep -E "RESULT gemm-alternating" $OUT/r/gemm_30B.txt | sed -E "s/.*Qwen3-30B-A3B (.*) \((M|K)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r
echo "total $(el) s"

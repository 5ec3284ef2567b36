#!/usr/bin/env bash
# Prepared in the thirty-fourth session (not run): issue 4's "done when", measured in one call on the H200: the
# layer against PyTorch's (next-headline.sh: medians, 6 s soaks, joules a step), then each GEMM of the layer at
# both shapes against cuBLAS's dense GEMM alternating (benches/gemm.rs) and torch._grouped_mm on the same counts
# (benches/torch_gemm.py). b65 = main d0c6de8 + the gemm bench's heat (both in-producer gathers the default).
# Carry [".dev/b65"] (~2-3 min: 117 s on an H100, bound 565 s). On an H100 the ratios hold within the call only (not the issue's).
# Predicted (H200): forward 2.47-2.51x PyTorch, step 2.0-2.05x; M-grouped GEMMs 0.87-0.96 of cuBLAS at 30B except dh
# + SwiGLU (~0.80-0.83); K-grouped bf16 out ~0.85, f32 ~0.73-0.77.
t0=$(date +%s); O=$OUT
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
OUT=$O/h HEADLINE_BIN=b65/main bash "$(dirname "$0")/next-headline.sh"
. "$(dirname "$0")/prelude.sh" b65
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b65/main
BOUND=$(( 565 - ($(date +%s) - t0) )); echo "headline took $(( 565 - BOUND )) s"
MEGAMOE_GEMM_COUNTS_DIR=$OUT/r timeout $(to 330 60) $B/gemm --bench > $OUT/r/gemm.txt 2>&1
echo "== gemm (both shapes) rc $? at $(el) s"
alt_summary $OUT/r/gemm.txt
grep -E "FAILED|all written: false|panicked" $OUT/r/gemm.txt | head -4
PYTHONUNBUFFERED=1 timeout $(to 120 0) python3 ../benches/torch_gemm.py $OUT/r > $OUT/r/torch_gemm.txt 2>&1
echo "== torch_gemm rc $? at $(el) s"
grep -h "^RESULT" $OUT/r/torch_gemm.txt | cut -c1-200 | head -20
echo "total $(el) s"

#!/usr/bin/env bash
# Call 9 of 2026-12-04f: what ragged K costs the weight gradients. cuBLAS's batched GEMM (128 x 1024 rows, same
# output bytes) reaches 0.81 / 0.83 of dense on dW2 / dW1 (call 7) where ours reaches 0.75-0.77 with random routing
# (each expert's last k-step partial: ~3% of the k-steps). The gemm bench at 30B with balanced routing (every
# expert exactly 1024 rows) and random routing, alternating with cuBLAS, twice each (binary .dev/b28/main/gemm).
# Command `bash docs/calls/2026-12-04f-call9.sh`, carry [".dev/b28"].
. "$(dirname "$0")/prelude.sh" b28
for rt in balanced random balanced random; do
  MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 60 b28/main/gemm --bench > $OUT/r/gemm_${rt}_$(el).txt 2>&1
  echo "== gemm 30B $rt rc $? at $(el) s"
  grep -E "RESULT gemm-alternating" $(ls -t $OUT/r/gemm_${rt}_*.txt | head -1) | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
done
echo "total $(el) s"

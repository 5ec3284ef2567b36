#!/usr/bin/env bash
# Call 8 of 2026-12-04f: cuBLAS runs every reference GEMM in 2-CTA clusters on a 132-CTA grid (call 7); every
# cluster form of ours lost 2-10% (sixth to seventeenth sessions). First suspect to settle: how many 2-CTA clusters
# of our kernels fit at once (cuOccupancyMaxActiveClusters, printed under MEGAMOE_DEBUG): fewer than 66 means a
# smaller persistent grid than the single-CTA kernels'. The gemm bench at 30B with the A-sharing and the B-sharing
# variants (binary .dev/b28/main/gemm). Command `bash docs/calls/2026-12-04f-call8.sh`, carry [".dev/b28"].
. "$(dirname "$0")/prelude.sh" b28
for mc in a b; do
  MEGAMOE_DEBUG=1 MEGAMOE_MC=$mc MEGAMOE_BENCH_ONLY=30B timeout 60 b28/main/gemm --bench > $OUT/r/gemm_mc_$mc.txt 2>&1
  echo "== gemm 30B MEGAMOE_MC=$mc rc $? at $(el) s"
  grep -E "active clusters" $OUT/r/gemm_mc_$mc.txt | sort | uniq -c | head -12
  grep -E "RESULT gemm-alternating" $OUT/r/gemm_mc_$mc.txt | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
done
echo "total $(el) s"

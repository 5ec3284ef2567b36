#!/usr/bin/env bash
# Call 10 of 2026-12-04f: what the partial last k-step costs the weight gradients. Call 9: balanced routing (no
# partial k-steps) runs them 4-7% faster than random routing (f32 0.73 -> 0.77, bf16 0.81 -> 0.87 of cuBLAS). In an
# expert's last k-step both consumer warpgroups zero the rows past its end (A box + two B boxes each), then meet at a
# 256-thread barrier (the B boxes are shared). Binaries: "main" = .dev/b28/main (0e67e45), "p0" = .dev/b29/p0
# (docs/wip/probe-wgrad-no-zero-tail.patch: no zeroing, no barrier; wrong results in partial tiles: timing only),
# "pw" = .dev/b29/pw (docs/wip/wgrad-zero-tail-per-warpgroup.patch: each warpgroup zeroes its A box and all four B
# boxes, then waits for its own 128 threads only). The gemm bench at 30B, random routing, alternating with cuBLAS,
# each binary twice in rotation. Predicted: p0 recovers 1-4% of the 4-7% (the rest: the padded rows' MMA and
# loads); pw between main and p0.
# Command `bash docs/calls/2026-12-04f-call10.sh`, carry [".dev/b28", ".dev/b29"].
. "$(dirname "$0")/prelude.sh" b29
for f in b28/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
for v in b28/main b29/p0 b29/pw b28/main b29/p0 b29/pw; do
  n=${v#*/}
  MEGAMOE_BENCH_ONLY=30B timeout 40 $v/gemm --bench > $OUT/r/gemm_${n}_$(el).txt 2>&1
  echo "== gemm 30B $n rc $? at $(el) s"
  grep -E "^RESULT gemm .*bwd dW" $(ls -t $OUT/r/gemm_${n}_*.txt | head -1) | grep -oE "bwd dW[12]( bf16 out)?|rel err [0-9.e+-]+ \(8 rows|all written: [a-z]+" | paste -sd' '
  grep -E "RESULT gemm-alternating .*dW" $(ls -t $OUT/r/gemm_${n}_*.txt | head -1) | sed -E "s/.*bwd ([^(]*(\([^)]*\))?) \(K-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1: \3 \4 \5/"
done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the twenty-second session as next-*.sh; run unchanged as 2026-12-04g call 3 (twenty-third session, docs/RESULTS.md). Call B of docs/wip/wgrad-expert-maps.patch (see call A's header):
# the timings, against main (.dev/b28/main = 0e67e45: the weight-gradient kernels of main 8c8f692, SASS for SASS). gemm
# bench at 30B alternating with cuBLAS, random routing, main and maps twice in rotation, then Zipf 1.0 with one seed
# for both; the layer at 30B, main and maps. Predicted: dW2 / dW1 2-4% faster with f32 output, 3-5% with bf16 (the
# probe without the zeroing: -1.5..-4.7% / -4%); M-grouped unchanged; the layer's fwd + bwd -40..-80 us (two builder
# launches of a few us each included). Also "mc" (.dev/b29/mc, docs/wip/wgrad-clusters.patch on top) with
# MEGAMOE_WGRAD_SCHED=clusters: the weight gradients in 2-CTA clusters sharing B (what cuBLAS's batched reference
# does, 2026-12-04f call 7); every cluster form of the M-grouped GEMMs lost 2-3%: predict 0.97-1.03x of maps. And
# "k16" (.dev/b29/k16: maps + clusters + docs/wip/wgrad-skip-empty-k16.patch, default schedule): the empty k16
# steps of each expert's last k-tile not issued (~0.375 of a k-tile's MMA a tile of ~16.5): predict 1-2% on dW1 /
# dW2 over maps.
# Command `bash docs/calls/2026-12-04g-call3.sh`, carry [".dev/b28", ".dev/b29"] (~6 min).
. "$(dirname "$0")/prelude.sh" b29
for f in b28/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
for v in b28/main b29/maps b29/k16 b29/mc:clusters b28/main b29/maps b29/k16 b29/mc:clusters b28/main:zipf b29/k16:zipf; do
  b=${v%%:*}; n=${b#*/}; rt=random; seed=""; sc=dynamic
  case $v in *:zipf) rt=zipf:1.0; seed=4242;; *:clusters) sc=clusters;; esac
  MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_SEED=${seed:-} MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 40 $b/gemm --bench > $OUT/r/gemm_${n}_${rt/:/}_$(el).txt 2>&1
  rc=$?; f=$(ls -t $OUT/r/gemm_${n}_*.txt | head -1)
  echo "== gemm 30B $n $rt rc $rc at $(el) s"
  grep -E "^RESULT gemm .*bwd dW" $f | grep -oE "bwd dW[12]( bf16 out)?|rel err [0-9.e+-]+ \(8 rows|all written: [a-z]+" | paste -sd' '
  grep -E "RESULT gemm-alternating" $f | sed -E "s/.*(fwd|bwd) ([^(]*(\([^)]*\))?) \((K|M)-grouped.*megamoe ([0-9]+ us).*cuBLAS dense ([0-9]+ us).*ours\/cuBLAS ([0-9.]+).*/  \1 \2: \5 \6 \7/"
done
for v in b28/main b29/maps b29/k16 b29/mc:clusters; do
  b=${v%%:*}; n=${b#*/}; sc=dynamic
  case $v in *:clusters) sc=clusters;; esac
  MEGAMOE_WGRAD_SCHED=$sc MEGAMOE_BENCH_ONLY=30B timeout 90 $b/layer --bench > $OUT/r/layer_$n.txt 2>&1
  echo "== layer 30B $n rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved)" $OUT/r/layer_$n.txt | cut -c1-220
done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the fifty-second session: a probe, not a change: each GEMM of the layer at Qwen3-Next-80B-A3B's
# fine-grained shape (H 2048, I 512, E 512, top-10, T 16384: 320 rows an expert) against cuBLAS's dense GEMM of the
# same total size and its strided-batched GEMM on the same grouped work (E batches of 320 rows), random and balanced
# routing, then 30B in the same call (`MEGAMOE_BENCH_SHAPE`, benches/gemm.rs). b129 = main's gemm bench. Carry
# [".dev/b129"] (~4-5 min, BOUND=560).
# Question: are the fine-grained GEMMs ~30% slower per FLOP (2026-12-07e call 5) because of the grouping itself
# (cuBLAS's batched GEMM on the same E small problems slow too) or our tiles (ours well under cuBLAS's batched)?
# Predicted: ours 0.60-0.75 of the dense GEMM at next (0.9+ at 30B); cuBLAS batched 0.65-0.85 of dense for the
# M-grouped, 0.5-0.7 for the weight gradients (E outputs of 1024 x 2048 and 2048 x 512, 3.2 GB in bf16); ours within
# 0.9-1.05 of batched; balanced routing 1.0-1.05x random (320 rows are 2.5 m-tiles either way).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b129}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-560}
B=$BDIR/main
gemm_run() { local label=$1; shift
  local f=$OUT/r/gemm_${label// /_}.txt
  env "$@" MEGAMOE_BENCH_HEAT=1 timeout $(to 170 20) $B/gemm --bench > $f 2>&1
  echo "== gemm $label rc $? at $(el) s"
  alt_summary $f
  grep -h "RESULT gemm-batched" $f | sed -E 's/RESULT gemm-batched //; s/ \(K-grouped\) M=[0-9]+ N=[0-9]+ K=[0-9]+//' | cut -c1-300
  grep -E "FAILED|all written: false|panicked" $f | head -4; }
gemm_run "next random" MEGAMOE_BENCH_SHAPE=2048,512,512,10 MEGAMOE_BENCH_ROUTING=random
gemm_run "next balanced" MEGAMOE_BENCH_SHAPE=2048,512,512,10 MEGAMOE_BENCH_ROUTING=balanced
gemm_run "30B random" MEGAMOE_BENCH_ONLY=30B MEGAMOE_BENCH_ROUTING=random
echo "total $(el) s"

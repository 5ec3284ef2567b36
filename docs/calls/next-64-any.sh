#!/usr/bin/env bash
# Fifty-sixth session's next call, whatever card comes. Carry [".dev/b141", ".dev/b142", ".dev/b143"]: first
# next-64-shared.sh (b143, b142: one layer for many model layers, its two tests, ~1.5 min); b141 = main 63f0ed5's
# layer and gemm benches and GPU tests (rebuild: `BDIR=$PWD/.dev/b141 bash docs/calls/2026-12-04c-build.sh main
# layer_forward layer_backward fp8 ep graph grouped_gemm`), b142 = its libmegamoe_capi.so (rebuild: `mkdir -p
# .dev/b142/capi && cargo build --release -p megamoe-capi && cp target/release/libmegamoe_capi.so .dev/b142/capi/ &&
# strip .dev/b142/capi/*.so && gzip -f .dev/b142/capi/*.so`).
# On an H200: issue 4's figure set (next-done-when.sh on b141, ~9 min). On an H100: SonicMoE's Figure 14 shapes
# through the bindings against the torch._grouped_mm layer (next-sonic-fig14.sh on b142): the two top-16 shapes at
# H = 4096 first (inside the 2^32 limit since 48093de, never run), then 7B / 1.4B n=256 with dx's combine by the rule.
# Predicted (H100): checks pass; 30B n=256 (T 32768, H 4096, I 256, E 256, top-16) forward ~420-450 / backward
# ~380-430 TFLOP/s against SonicMoE's ~427 / ~459 (I = 256 as at 7B, but H = 4096 takes the side copy and long
# rows); 120B n=512 ~500-530 / ~480-520 against ~517 / ~526; 7B n=256 backward ~370 (the layer bench's 374), 1.4B
# ~340.
n=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU $n"
d=$(dirname "$0"); t0=$(date +%s); O=$OUT
mkdir -p $O/s $O/m
OUT=$O/s bash $d/next-64-shared.sh
left=$(( ${BOUND:-560} - ($(date +%s) - t0) )); echo "== shared done, $left s left"
case "$n" in
  *H200*) OUT=$O/m DW=b141 BOUND=$left bash $d/next-done-when.sh ;;
  *) OUT=$O/m BDIR=b142 KEYS="sfg-30b-256 sfg-120b-512 sfg-7b-256 sfg-1b-256" BOUND=$left bash $d/next-sonic-fig14.sh ;;
esac

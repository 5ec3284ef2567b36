#!/usr/bin/env bash
# Forty-third session's last call, the card not known. b96 = main bb219ad (the session's kernels): the layer and
# gemm benches, tests fp8, layer_forward, graph, and the release libmegamoe_capi.so (as next-fp8-headline.sh's
# header builds b92). Carry [".dev/b96"].
# On an H200: the FP8 and bf16 layer lines at both shapes and the FP8 step's traces (next-fp8-headline.sh: the
# README's FP8 figures on the H200), then graph. On any other card: the final main's tests fp8, graph and
# layer_forward whole.
# Predicted (H200): the z-saved FP8 step 1.10-1.15x the bf16 z-saved step at 30B, 1.12-1.18x at 235B; tests pass.
d=$(dirname "$0"); O=$OUT; t0=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-fp8-headline.sh (b96)"; OUT=$O/h BIN=b96 BOUND=400 bash "$d/next-fp8-headline.sh"
  ( OUT=$O/t; . "$d/prelude.sh" b96; trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
    BOUND=$(( 580 - ($(date +%s) - t0) )); B=b96/main; t graph 120 0 )
  exit
fi
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$d/prelude.sh" b96
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-400}
B=b96/main
t fp8 120 200
t graph 100 100
t layer_forward 200 0
echo "total $(el) s"

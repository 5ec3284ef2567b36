#!/usr/bin/env bash
# Thirty-fourth session, call 2: main with dy gathered in the dh GEMM's producer the default (b61 = main with the
# flip, not yet committed when built). The headline (next-headline.sh on b61: medians, 6 s soaks, joules a step)
# and then layer_forward and tests/ep.rs whole with in-producer (x and dy) the default. Carry [".dev/b61"].
# Predicted (H200): forward ~2400-2470 us against PyTorch's ~5980 (2.42-2.49x), step (bf16 weight gradients) ~7400 us
# (~2.0x); on an H100 the ratios only.
t0=$(date +%s); O=$OUT
OUT=$O/h HEADLINE_BIN=b61/main bash "$(dirname "$0")/next-headline.sh"
. "$(dirname "$0")/prelude.sh" b61
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b61/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BOUND=$(( 565 - ($(date +%s) - t0) )); echo "headline took $(( 565 - BOUND )) s"
t layer_forward 260 150
t ep 200 0
echo "total $(el) s"

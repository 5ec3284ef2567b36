#!/usr/bin/env bash
# Thirty-fourth session, call 3: layer_backward and graph whole with dy gathered in the producer the default (b61),
# then the f32 weight gradients beside cuBLAS's strided-batched GEMM under ncu (next-wgrad-vs-batched.sh on b61's
# gemm bench). Carry [".dev/b61"].
t0=$(date +%s); O=$OUT
(OUT=$O/t
. "$(dirname "$0")/prelude.sh" b61
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b61/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BOUND=380
t layer_backward 170 30
t graph 60 0
echo "tests took $(el) s")
OUT=$O/w WB=b61 BOUND=$(( 565 - ($(date +%s) - t0) )) bash "$(dirname "$0")/next-wgrad-vs-batched.sh"

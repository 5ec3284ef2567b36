#!/usr/bin/env bash
# Thirty-second session, call 7: main with the run-time tile walk the default (main, binaries
# .dev/b57/main): no knob set, so every single-CTA M-grouped bf16 GEMM runs its `_dyn` kernel. The graph tests
# (the step captured with the counter's memset nodes, replayed bitwise), grouped_gemm whole, layer_backward whole,
# then layer_forward whole as the bound allows. Carry [".dev/b57"].
. "$(dirname "$0")/prelude.sh" b57
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b57/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t graph 60 120
t grouped_gemm 70 60
t layer_backward 120 10
t layer_forward 120 0
echo "total $(el) s"

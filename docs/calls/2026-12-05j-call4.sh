#!/usr/bin/env bash
# Thirty-fifth session, call 4: main after the gathering dW2's removal (d0c6de8) plus the gemm bench's heat
# (b65). layer_backward whole and layer_forward's in_producer tests (the host's backward path changed: the dh
# kernel's write-out and the dx sum's split are unconditional again), then the gemm bench at both shapes with
# `MEGAMOE_BENCH_HEAT` (3 s before each shape's alternating lines). Carry [".dev/b65"], ~5 min, bound 330 s.
# Predicted: every test passes; GEMM1 plain at 30B ~0.90-0.93 (0.84 unheated in call 3, its cuBLAS at 784 TFLOP/s
# against the next line's 675), the other lines as call 3 within ~3%.
BOUND=330
. "$(dirname "$0")/prelude.sh" b65
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b65/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t layer_backward 150 150
t layer_forward 80 70 in_producer
timeout $(to 80 0) $B/gemm --bench > $OUT/r/gemm.txt 2>&1
echo "== gemm (both shapes, heated) rc $? at $(el) s"; grep "^HEAT" $OUT/r/gemm.txt
alt_summary $OUT/r/gemm.txt
grep -E "FAILED|all written: false|panicked" $OUT/r/gemm.txt | head -4
echo "total $(el) s"

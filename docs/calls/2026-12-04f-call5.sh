#!/usr/bin/env bash
# Call 5 of 2026-12-04f: the 235B layer against PyTorch's torch._grouped_mm layer in one call (the README's 235B
# figures date from the ninth session, before the epilogue-warp kernels), with the landed main
# (.dev/b28/main/layer = 0e67e45's tree). Command `bash docs/calls/2026-12-04f-call5.sh`, carry [".dev/b28"].
. "$(dirname "$0")/prelude.sh" b28
MEGAMOE_BENCH_ONLY=235B timeout 240 b28/main/layer --bench > $OUT/r/layer_235B.txt 2>&1
echo "== layer 235B rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/layer_235B.txt)"
grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z saved|forward\+backward as one)" $OUT/r/layer_235B.txt | cut -c1-150
MEGAMOE_TORCH_LOOP=0 MEGAMOE_BENCH_ONLY=235B PYTHONUNBUFFERED=1 timeout 150 python3 ../benches/torch_layer.py > $OUT/r/torch_235B.txt 2>&1
echo "== torch 235B rc $? at $(el) s"
grep -E "^RESULT" $OUT/r/torch_235B.txt | cut -c1-150
echo "total $(el) s"

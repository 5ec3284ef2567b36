#!/usr/bin/env bash
# Call 3 of 2026-12-04f (prepared in the twenty-first session): the 30B layer against PyTorch's torch._grouped_mm layer in one
# call (issue 4's layer targets: forward >= 2.5x, forward + backward >= 2x), with uniform routing and with Zipf 1.0
# (users' ask 7: hot experts; benches/torch_layer.py draws the same distribution, never run before: no torch on
# the build machine). Our layer: .dev/b28/main/layer (main a403490 + docs/wip/wgrad-busiest-first.patch,
# as landed after calls 1-2). Each pair alternates ours
# and PyTorch's processes twice for the uniform case (the spread between processes is a few %).
# Command `bash docs/calls/2026-12-04f-call3.sh`, carry [".dev/b28"] (~6 min).
. "$(dirname "$0")/prelude.sh" b28
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/r/gpu.txt
for v in random:1 random:2 zipf:1.0:1; do
  rt=${v%:*}; n=${v##*:}; tag=${rt/:/}_$n
  MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 90 b28/main/layer --bench > $OUT/r/layer_$tag.txt 2>&1
  echo "== layer 30B $rt ($n) rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/layer_$tag.txt)"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward)" $OUT/r/layer_$tag.txt | cut -c1-150
  MEGAMOE_TORCH_LOOP=0 MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B PYTHONUNBUFFERED=1 timeout 120 \
    python3 ../benches/torch_layer.py > $OUT/r/torch_$tag.txt 2>&1
  echo "== torch 30B $rt ($n) rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/torch_$tag.txt)"
  grep -E "^RESULT" $OUT/r/torch_$tag.txt | cut -c1-150
done
echo "total $(el) s"

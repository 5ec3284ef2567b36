#!/usr/bin/env bash
# Prepared in the twenty-first session (not run): the 30B layer against PyTorch's torch._grouped_mm layer in one
# call (issue 4's layer targets: forward >= 2.5x, forward + backward >= 2x), with uniform routing and with Zipf 1.0
# (users' ask 7: hot experts; benches/torch_layer.py draws the same distribution, never run before: no torch on
# the build machine). Our layer: .dev/b27/lpt/layer (main + docs/wip/wgrad-busiest-first.patch; run after
# next-wgrad-busiest-first-a.sh and -b.sh, and rebuild with main's tree if that patch did not land). Each pair alternates ours
# and PyTorch's processes twice for the uniform case (the spread between processes is a few %).
# Command `bash docs/calls/next-layer-vs-torch.sh`, carry [".dev/b27"] (~6 min).
. "$(dirname "$0")/prelude.sh" b27
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > $OUT/r/gpu.txt
for v in random:1 random:2 zipf:1.0:1; do
  rt=${v%:*}; n=${v##*:}; tag=${rt/:/}_$n
  MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B timeout 90 b27/lpt/layer --bench > $OUT/r/layer_$tag.txt 2>&1
  echo "== layer 30B $rt ($n) rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/layer_$tag.txt)"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward)" $OUT/r/layer_$tag.txt | cut -c1-150
  MEGAMOE_TORCH_LOOP=0 MEGAMOE_BENCH_ROUTING=$rt MEGAMOE_BENCH_ONLY=30B PYTHONUNBUFFERED=1 timeout 120 \
    python3 ../benches/torch_layer.py > $OUT/r/torch_$tag.txt 2>&1
  echo "== torch 30B $rt ($n) rc $? at $(el) s: $(grep 'rows per expert' $OUT/r/torch_$tag.txt)"
  grep -E "^RESULT" $OUT/r/torch_$tag.txt | cut -c1-150
done
echo "total $(el) s"

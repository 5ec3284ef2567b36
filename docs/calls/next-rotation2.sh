#!/usr/bin/env bash
# Forty-first session, after next-rotation.sh ran on an H100 (docs/RESULTS.md 2026-12-06d call 6): on an H200 the
# same rotation at both shapes (issue 4's figures); on any other card the rotation at 30B with the host's enqueue
# time of one forward (the bindings' lone forward read 8.7% over its back-to-back one on the H100, the Rust layer
# bench's 0.6% on the H200), then the Rust layer bench (b84) at 30B for its own rotation line on the same card.
# Carry [".dev/b84", ".dev/b85"].
# Predicted: the bindings' host enqueue ~100-200 us (the lone forward's excess), PyTorch's hidden behind its own
# kernels; the Rust rotation line 1.00-1.01x.
d=$(dirname "$0"); O=$OUT
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-rotation.sh"; OUT=$O bash "$d/next-rotation.sh"; exit
fi
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$d/prelude.sh" b84
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
for f in b85/*/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
export MEGAMOE_LIB=$PWD/b85/capi/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 120 120) python3 ../benches/torch_rotation.py 30B > $OUT/r/rotation_30B.txt 2>&1
echo "== rotation 30B rc $? at $(el) s"
grep -h "^RESULT\|^check\|^HEAT\|FAILED\|Error\|Traceback" $OUT/r/rotation_30B.txt | cut -c1-300
MEGAMOE_BENCH_ONLY=30B timeout $(to 150 0) b84/main/layer --bench > $OUT/r/layer.txt 2>&1
echo "== layer 30B rc $? at $(el) s"
grep -h "^RESULT megamoe forward alone\|^RESULT megamoe forward, 10\|^RESULT megamoe forward Qwen" $OUT/r/layer.txt | cut -c1-300
echo "total $(el) s"

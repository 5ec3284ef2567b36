#!/usr/bin/env bash
# Prepared in the thirty-ninth session: CUDA-graph capture through the C ABI and the PyTorch bindings, any card.
# b71 = main 0238bd2+: the capi and graph test binaries (release) and the release libmegamoe_capi.so. Carry
# [".dev/b71"] (~3 min, bound 565 s). Rebuild b71 (a fresh checkout has no .dev):
#   mkdir -p .dev/b71/capi && cargo build --release -p megamoe-capi && cp target/release/libmegamoe_capi.so .dev/b71/capi/
#   exe() { grep -o '"executable":"[^"]*"' | cut -d'"' -f4 | grep /deps/ | tail -1; }
#   cp "$(cargo test --release -p megamoe-capi --test capi --no-run --message-format=json | exe)" .dev/b71/capi/capi
#   cp "$(cargo test --release --test graph --no-run --message-format=json | exe)" .dev/b71/capi/graph
#   for f in .dev/b71/capi/*; do strip $f; gzip -f $f; done
# Predicted: capi 11/11 (the new ring + capture test: replays bitwise the eager calls, a stale handle and a capture
# with every slot held refused); graph whole passes (graph_capture_before_any_eager_call: the maps placed by
# recorded copies; the earlier tests unchanged); the Python test "all passed" with both allocators, its two graph
# cases bitwise the eager step; the bench's graph line ~1.00-1.02x the eager step through the bindings (the Rust
# step's graph is 1.00-1.01x; Python's per-call overhead is tens of us of ~8.7 ms).
t0=$(date +%s)
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b71
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b71/capi
t capi 120 300
t graph 200 200
export MEGAMOE_LIB=$PWD/$B/libmegamoe_capi.so
MEGAMOE_TORCH_BENCH=1 PYTHONUNBUFFERED=1 timeout $(to 180 60) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test (default allocator, bench) rc $? at $(el) s"
grep -E "^seed|FAIL|RESULT|all passed|Error|error|Traceback" $OUT/r/torch_binding.txt | cut -c1-300 | head -14
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 timeout $(to 120 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding_exp.txt 2>&1
echo "== python test (expandable segments) rc $? at $(el) s"
grep -E "FAIL|all passed|Error|error|skipped|Traceback" $OUT/r/torch_binding_exp.txt | cut -c1-300 | head -8
echo "total $(el) s"

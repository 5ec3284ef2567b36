#!/usr/bin/env bash
# Prepared in the thirty-ninth session: the PyTorch custom operators (moe_op: torch.compile without a graph break)
# and the C ABI's stateless backward, any card. b72 = main 5963dc7: the capi and layer_backward test binaries
# (release) and the release libmegamoe_capi.so (rebuild as next-torch-graphs.sh's header says, with layer_backward
# for graph). Carry [".dev/b72"] (~3 min, bound 565 s).
# Predicted: capi 12/12 (new: the stateless forward + routed backward bitwise the handle path); layer_backward's route_into test bitwise the forward's state; the Python test "all passed"
# with both allocators: moe_op bitwise moe, torch.compile(fullgraph=True) with aot_eager bitwise (inductor too, or
# reported as not run), the op path's CUDA graph bitwise; the bench's custom-operator line ~0.99x the autograd
# Function (the routing again in the backward: ~35 us of ~8.7 ms).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b72
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b72/capi
t capi 120 300
t layer_backward 60 250 route_into
export MEGAMOE_LIB=$PWD/$B/libmegamoe_capi.so
MEGAMOE_TORCH_BENCH=1 PYTHONUNBUFFERED=1 timeout $(to 240 60) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test (default allocator, bench) rc $? at $(el) s"
grep -E "^seed|FAIL|RESULT|all passed|Error|error|Traceback|torch.compile" $OUT/r/torch_binding.txt | cut -c1-300 | head -20
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 timeout $(to 150 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding_exp.txt 2>&1
echo "== python test (expandable segments) rc $? at $(el) s"
grep -E "FAIL|all passed|Error|error|skipped|Traceback" $OUT/r/torch_binding_exp.txt | cut -c1-300 | head -8
echo "total $(el) s"

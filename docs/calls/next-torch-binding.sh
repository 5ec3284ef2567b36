#!/usr/bin/env bash
# Prepared in the thirty-eighth session (not run): the C ABI (capi/, libmegamoe_capi.so) and the PyTorch bindings
# on it (python/megamoe_torch.py, ctypes), any card. b70 = main + capi: the `capi` test binary (release) and the
# release libmegamoe_capi.so. Carry [".dev/b70"] (~2-3 min: the capi tests ~20 s, the Python test twice ~40 s each
# with the 30B bench in the first, bound 565 s). Rebuild b70 (a fresh checkout has no .dev):
#   mkdir -p .dev/b70/capi && cargo build --release -p megamoe-capi && cp target/release/libmegamoe_capi.so .dev/b70/capi/
#   cp "$(cargo test --release -p megamoe-capi --test capi --no-run --message-format=json | grep -o '"executable":"[^"]*"' \
#     | cut -d'"' -f4 | grep /deps/ | tail -1)" .dev/b70/capi/capi && for f in .dev/b70/capi/*; do strip $f; gzip -f $f; done
# Predicted: capi 10/10 (bitwise the Rust API; rel err as layer_backward's, y/dx ~3-4e-3); the Python test "all
# passed" twice (the default allocator and expandable segments: the extent check must accept a tensor spanning
# several mappings; a fail there reads "past the end" on a valid tensor); the binding's 30B forward + backward by
# autograd ~1.9-2.0x the torch._grouped_mm layer (the Rust bench's step ratio less a few tens of us of Python).
t0=$(date +%s)
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b70
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b70/capi
t capi 120 150
export MEGAMOE_LIB=$PWD/$B/libmegamoe_capi.so
MEGAMOE_TORCH_BENCH=1 PYTHONUNBUFFERED=1 timeout $(to 150 60) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test (default allocator, bench) rc $? at $(el) s"
grep -E "^seed|FAIL|RESULT|all passed|Error|error" $OUT/r/torch_binding.txt | cut -c1-300 | head -12
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PYTHONUNBUFFERED=1 timeout $(to 120 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding_exp.txt 2>&1
echo "== python test (expandable segments) rc $? at $(el) s"
grep -E "FAIL|all passed|Error|error|skipped" $OUT/r/torch_binding_exp.txt | cut -c1-300 | head -8
echo "total $(el) s"

#!/usr/bin/env bash
# Forty-first session: the review mends and the Python test's refactor (shared autograd_step / same_five /
# check_compiled helpers) on a GPU: capi whole, python/test_megamoe_torch.py (no bench), benches/bindings_host.py.
# b86 = main 73cec38's capi test binary and release libmegamoe_capi.so after the mends (as next-pick5.sh's b85). Carry
# [".dev/b86"] (~1 min, any card).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b86
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-200}
B=b86/capi; t capi 60 130
export MEGAMOE_LIB=$PWD/$B/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 100 25) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test rc $? at $(el) s"
grep -E "^seed|FAIL|all passed|Error|error|Traceback|torch.compile|^case op" $OUT/r/torch_binding.txt | cut -c1-300 | head -30
PYTHONUNBUFFERED=1 timeout $(to 25 0) python3 ../benches/bindings_host.py > $OUT/r/bindings_host.txt 2>&1
echo "== bindings_host rc $? at $(el) s"
grep "^RESULT" $OUT/r/bindings_host.txt

#!/usr/bin/env bash
# The forty-first session's third call, the card not known. b82 = main 94e3256 (route_fused cooperative, PDL's
# opt-in without an early trigger): `BDIR=/work/main/.dev/b82 bash docs/calls/2026-12-04c-build.sh main layer_forward
# layer_backward graph ep`. b83 = the same main's capi and layer_backward test binaries and release libmegamoe_capi.so
# (as next-torch-graphs.sh's header builds b71). Carry [".dev/b82", ".dev/b83"] (19 MiB).
# On an H200: issue 4's done-when (`DW=b82 next-done-when.sh`: the per-forward and back-to-back ratios).
# On any other card: 1. the layer's PDL test (no early trigger now: bitwise the plain launches), 2. the headline
# (next-headline.sh on b82: ours and PyTorch's forward alone and 10 back to back, the lone forward after 1 GiB of
# memset against after idle, the step; 6 s soaks), 3. the C ABI's tests and the PyTorch bindings' test with the
# bench (the custom operators, torch.compile, graphs) on this main's library (route_fused since they last ran).
# Predicted: PDL test passes; lone forward after the memset within 1% of the back-to-back one and ~3-5% under the
# lone one after idle (the lone extra is before the first kernel: 2026-12-06d call 1); capi 12/12, Python all passed.
d=$(dirname "$0"); t0=$(date +%s); O=$OUT
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-done-when.sh (b82)"; OUT=$O DW=b82 bash "$d/next-done-when.sh"; exit
fi
echo "pick: not an H200 -> PDL test, headline (b82), capi + bindings (b83)"
( OUT=$O/pdl; . "$d/prelude.sh" b82; trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
  B=b82/main BOUND=130; t layer_backward 120 0 programmatic )
OUT=$O/h HEADLINE_BIN=b82/main bash "$d/next-headline.sh"
( OUT=$O/ops; . "$d/prelude.sh" b83; trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
  BOUND=$(( 590 - ($(date +%s) - t0) )); echo "ops bound $BOUND s"
  B=b83/capi; t capi 100 120
  export MEGAMOE_LIB=$PWD/$B/libmegamoe_capi.so
  MEGAMOE_TORCH_BENCH=1 PYTHONUNBUFFERED=1 timeout $(to 240 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
  echo "== python test (default allocator, bench) rc $? at $(el) s"
  grep -E "^seed|FAIL|RESULT|all passed|Error|error|Traceback|torch.compile" $OUT/r/torch_binding.txt | cut -c1-300 | head -20 )
echo "total $(( $(date +%s) - t0 )) s"

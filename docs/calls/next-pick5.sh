#!/usr/bin/env bash
# The forty-first session's fourth call, the card not known. b84 = main def3d47 (the FP8 custom operators, the
# layer bench's lone-against-back-to-back rotation line): `BDIR=/work/main/.dev/b84 bash
# docs/calls/2026-12-04c-build.sh main layer_forward layer_backward graph ep`. b85 = the same main's capi test binary
# and release libmegamoe_capi.so (as next-torch-graphs.sh's header builds b71, without graph). Carry [".dev/b84",
# ".dev/b85"] (17 MiB).
# On an H200: issue 4's done-when (`DW=b84 next-done-when.sh`). On any other card: 1. capi (new: the FP8 codes path
# bitwise the handle path), 2. the PyTorch bindings' test with the bench (new: case_op_fp8: moe_op_fp8 bitwise the
# handle path, torch.compile fullgraph, MoE(op=True, fp8=True), a CUDA graph), 3. the headline on b84 (new: ours and
# PyTorch's forward alone against 10 back to back in one rotation), 4. ep whole (route_fused cooperative, PDL's
# opt-in without trigger), under what is left.
# Predicted: capi 13/13; Python all passed; the rotation lines: ours and PyTorch's alone / back to back within 1-2%
# (the 5-7% of separate phases was drift), so the ratio reads the same either way; ep 27/27.
d=$(dirname "$0"); t0=$(date +%s); O=$OUT
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-done-when.sh (b84)"; OUT=$O DW=b84 bash "$d/next-done-when.sh"; exit
fi
echo "pick: not an H200 -> capi + bindings (b85), headline (b84), ep (b84)"
( OUT=$O/ops; . "$d/prelude.sh" b85; trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
  BOUND=250; B=b85/capi; t capi 60 150
  export MEGAMOE_LIB=$PWD/$B/libmegamoe_capi.so
  MEGAMOE_TORCH_BENCH=1 PYTHONUNBUFFERED=1 timeout $(to 180 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
  echo "== python test (default allocator, bench) rc $? at $(el) s"
  grep -E "^seed|FAIL|RESULT|all passed|Error|error|Traceback|torch.compile|^case op fp8" $OUT/r/torch_binding.txt | cut -c1-300 | head -30 )
OUT=$O/h HEADLINE_BIN=b84/main bash "$d/next-headline.sh"
grep -h "in one rotation" $O/h/r/*.txt 2>/dev/null | cut -c1-250
( OUT=$O/ep; . "$d/prelude.sh" b84; trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
  BOUND=$(( 585 - ($(date +%s) - t0) )); echo "ep bound $BOUND s"; B=b84/main; t ep 200 0 )
echo "total $(( $(date +%s) - t0 )) s"

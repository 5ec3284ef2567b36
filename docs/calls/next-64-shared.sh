#!/usr/bin/env bash
# Fifty-sixth session: one layer for many model layers. b143 = main's layer_backward test binary (rebuild: `cp "$(cargo
# test --release --test layer_backward --no-run --message-format=json | grep -o '"executable":"[^"]*"' | cut -d'"'
# -f4 | grep /deps/ | tail -1)" .dev/b143/main/layer_backward`, strip, gzip), b142 = main's libmegamoe_capi.so
# (next-64-any.sh's head). Carry [".dev/b143", ".dev/b142"]. ~1.5 min.
# Predicted: layer_backward one_layer_serves_two_model_layers_* 2/2 (forward A, forward B, backward B, backward A on
# one MoeLayer, bitwise each on its own layer); the Python test "all passed" with case_shared (a stacked pair of
# MoE(share_layer=True) modules trained a step bitwise against a layer each: bf16, z saved through the operators,
# FP8). If both pass: share_layer=True becomes MoE's default.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b143
for f in b142/*/*.gz; do [ -f "$f" ] && gunzip -f "$f"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-150}
B=b143/main
t layer_backward 40 90 one_layer_serves
export MEGAMOE_LIB=$PWD/b142/capi/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 90 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test rc $? at $(el) s: $(tail -1 $OUT/r/torch_binding.txt | cut -c1-120)"
grep -E "^case shared|FAIL|shared .*refused|Traceback|Error" $OUT/r/torch_binding.txt | head -12 | cut -c1-200
echo "total $(el) s"

#!/usr/bin/env bash
# Fifty-ninth session: main's GPU tests after the weight gradients' gathers became the default at I <= 512 (d78e110:
# `gemm::wgrad_gather_pays`; with z saved the layer's tests at small shapes now run `grouped_wgrad_*_ga*` and `_gb`
# unless they pin `WgradGather::Off`), then SonicMoE's 7B / 1.4B n=256 through the bindings (their rotation not rerun
# since the rule). b148 = main d78e110's layer_forward, layer_backward, fp8, graph test binaries and
# libmegamoe_capi.so (rebuild: `BDIR=$PWD/.dev/b148 bash docs/calls/2026-12-04c-build.sh main layer_forward
# layer_backward fp8 graph`, then `cargo build --release -p megamoe-capi` and the .so stripped and gzipped into
# .dev/b148/capi). Carry [".dev/b148"], timeout 600 (~9.5 min; layer_backward alone needs ~260 s).
# Predicted: every test passes (the branch's binaries passed every gather test and 57 layer tests with both gathers
# forced, 2026-12-08a); 7B / 1.4B n=256 backward ~410 / ~385 TFLOP/s (2026-12-07k: 354 / 329; the steps traced
# 1.117x / 1.114x faster with both gathering), SonicMoE's ~404 / ~364.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b148
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-590}
B=b148/main
t layer_backward 280 300
t layer_forward 120 180
t fp8 90 90
t graph 30 60
export MEGAMOE_LIB=$PWD/b148/capi/libmegamoe_capi.so
for key in sfg-7b-256 sfg-1b-256; do
  PYTHONUNBUFFERED=1 timeout $(to 45 0) python3 ../benches/torch_rotation.py $key > $OUT/r/rotation_$key.txt 2>&1
  echo "== rotation $key rc $? at $(el) s"
  grep -h "^check\|forward alone\|forward+backward\|step less\|FAILED\|Error\|Traceback" $OUT/r/rotation_$key.txt \
    | sed -E 's/RESULT rotation //; s/ \(medians of.*//' | cut -c1-220
done
echo "total $(el) s"

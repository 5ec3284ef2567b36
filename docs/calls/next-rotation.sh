#!/usr/bin/env bash
# Forty-first session: issue 4's layer ratios in one process, in rotation (benches/torch_rotation.py: our forward
# alone and 10 back to back, our step with z saved and bf16 weight gradients, each against the torch._grouped_mm
# layer's, the six timings in rotation after 3 s of both steps alternating), at 30B then 235B, through b85's
# libmegamoe_capi.so (main def3d47's; the script's Python is this checkout's). Carry [".dev/b85"] (~2-3 min, any card;
# on an H200 the 30B lines are issue 4's figures).
# Predicted (H200): forward 2.45-2.50x alone and back to back alike, step 1.90-1.97x (call 4's separate runs:
# 2.48-2.49x in their own rotations, step 1.93x).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
ROT=${ROT:-b85} # another build: ROT=bNN (bNN/capi/libmegamoe_capi.so.gz), e.g. b105 (main 8a6c828)
. "$(dirname "$0")/prelude.sh" $ROT
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-400}
export MEGAMOE_LIB=$PWD/$ROT/capi/libmegamoe_capi.so
for shape in 30B 235B; do
  PYTHONUNBUFFERED=1 timeout $(to 200 0) python3 ../benches/torch_rotation.py $shape > $OUT/r/rotation_$shape.txt 2>&1
  echo "== rotation $shape rc $? at $(el) s"
  grep -h "^RESULT\|^check\|^HEAT\|FAILED\|Error\|Traceback" $OUT/r/rotation_$shape.txt | cut -c1-300
done
echo "total $(el) s"

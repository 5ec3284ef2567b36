#!/usr/bin/env bash
# Forty-first session's last call, the card not known: on an H200 issue 4's layer ratios in rotation
# (next-rotation.sh); on any other card where the bindings' ~96 us of host time a forward goes
# (benches/bindings_host.py). Carry [".dev/b85"] (main def3d47's libmegamoe_capi.so; the Python is this checkout's).
# Predicted (other card): the bare C call ~20-30 us (the Rust API's enqueue 17-20 us plus the ABI's checks), the
# rest in Python (the stream query, five tensor checks, the Saved object).
d=$(dirname "$0"); O=$OUT
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-rotation.sh"; OUT=$O bash "$d/next-rotation.sh"; exit
fi
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$d/prelude.sh" b85
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-120}
export MEGAMOE_LIB=$PWD/b85/capi/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 100 0) python3 ../benches/bindings_host.py > $OUT/r/bindings_host.txt 2>&1
echo "== bindings_host rc $? at $(el) s"
head -60 $OUT/r/bindings_host.txt | cut -c1-200

#!/usr/bin/env bash
# Prepared in the fifty-third session after next-copy-rows.sh's miss (the movers' copy across rows with its row
# tokens read ahead made dx's side copy ~2x slower): which part costs. dx with the side copy forced on, traced
# (trace_step.py KEY op-z) with b132 (main's row-at-a-time copy, producer / consumer registers 72 / 216), b134v1
# (the row-at-a-time copy at 88 / 200: the register split alone), b134v2 (the flat run with a division a slot, no
# token look-ahead, 80 / 208), b134v3 (slots of 32 whole chunks of one row stepped alike in the warp, no division
# but the token's by top_k, no look-ahead, 88 / 200; rows of a chunk count not a multiple of 32 a row at a time),
# and layer_forward's side-copy and overlapped-gather tests on b134v3. Carry [".dev/b132", ".dev/b134v1",
# ".dev/b134v2", ".dev/b134v3"]. ~4 min.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b134v3
for d in b132 b134v1 b134v2; do for f in $d/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-380}
B=b134v3/main
t layer_forward 90 150 side_copy; t layer_forward 90 120 overlapped
tr1() { # LIBDIR KEY
  local f=$OUT/r/trace_$1_$2.txt
  MEGAMOE_LIB=$PWD/$1/capi/libmegamoe_capi.so MEGAMOE_SIDE_COPY=on PYTHONUNBUFFERED=1 timeout $(to 30 5) python3 ../benches/trace_step.py $2 op-z > $f 2>&1
  echo "== $1 $2 rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-30) $(grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | grep -E "bt_bf16_cpx" | cut -c1-75)"
  grep -h "FAILED\|Traceback\|Error" $f | head -2
}
for key in 30B sfg-7b-256 sfg-1b-256; do for d in b132 b134v1 b134v2 b134v3; do tr1 $d $key; done; done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the fifty-third session: the movers' copy across rows (`ep_common::copy_slot_rows`: eight 16-byte
# loads a lane over the flat run of a part's rows, the next round's row tokens read while a round's loads are in
# flight; the `_mv` kernels' producer warpgroup at 88 registers, consumers 200). Tests layer_forward whole (the
# overlapped gather's `_mv` GEMM1, the side copy forced on and off, bitwise the gather pass) and ep whole (the
# pull path keeps the row-at-a-time copy); then the step traced (trace_step.py KEY op-z) with the new library (b133)
# side copy on / off, and the old copy (b132, side copy on) beside it. Any card; carry [".dev/b132", ".dev/b133"].
# ~6 min (BOUND=560).
# Predicted: every test passes; dx with the side copy (grouped_gemm_bt_bf16_cpx_dyn) at 1.4B n=256 1626 -> ~500-600
# us, 7B n=256 1334 -> ~600, Qwen3-Next 1996 -> ~1400, 30B 1473 -> ~1300-1400 (one latency a round of 4 KiB instead
# of two a row); the side copy then faster than the gather pass at every shape traced (rule to be refitted).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b133
for f in b132/*/*.gz; do [ -f "$f" ] && gunzip -f "$f" && chmod +x "${f%.gz}"; done
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-560}
B=b133/main
t layer_forward 200 300
t ep 60 240
tr1() { # LIBDIR KEY SIDE ROUND
  local f=$OUT/r/trace_$1_$2_$3_$4.txt
  MEGAMOE_LIB=$PWD/$1/capi/libmegamoe_capi.so MEGAMOE_SIDE_COPY=$3 PYTHONUNBUFFERED=1 timeout $(to 40 5) python3 ../benches/trace_step.py $2 op-z > $f 2>&1
  echo "== $1 $2 side $3 r$4 rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-40)"
  grep -h "FAILED\|Traceback\|Error" $f | head -2
  grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | grep -E "bt_bf16|gather_rows" | cut -c1-80
}
for key in ${KEYS:-sfg-1b-256 sfg-7b-256 next 30B sfg-30b-512}; do
  tr1 b133 $key on 1; tr1 b133 $key off 1; tr1 b132 $key on 1; tr1 b133 $key on 2
done
echo "total $(el) s"

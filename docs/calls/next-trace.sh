#!/usr/bin/env bash
# Prepared in the fortieth session (not run): the 30B forward's kernels on the GPU's clock (benches/trace_forward.py:
# CUPTI through torch.profiler, since the device machine has no nsys), lone forwards against back to back, with the
# defaults, with MEGAMOE_PDL=on and with MEGAMOE_ROUTE=split: which kernels or gaps make a lone forward ~100 us longer
# (docs/RESULTS.md 2026-12-06c call 4) and what PDL changes at each boundary (it measured 0.6-1% slower).
# b80 = main 1029522's release libmegamoe_capi.so (`mkdir -p .dev/b80/capi && cargo build --release -p megamoe-capi &&
# cp target/release/libmegamoe_capi.so .dev/b80/capi/ && strip .dev/b80/capi/*.so && gzip -f .dev/b80/capi/*.so`).
# Carry [".dev/b80"] (~2 min, bound 300 s), any card.
# Predicted: back to back the gaps are ~1-3 us a boundary; lone, either the first kernel starts tens of us after the
# host's call (host latency) or GEMM1 itself runs longer (the GPU from idle); with PDL the gaps shrink and some
# kernel (GEMM1 or GEMM2) lengthens by more.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b80
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
export MEGAMOE_LIB=$PWD/b80/capi/libmegamoe_capi.so
for v in default pdl split; do
  case $v in pdl) e="MEGAMOE_PDL=on";; split) e="MEGAMOE_ROUTE=split";; *) e="MEGAMOE_SEED=1";; esac
  env $e PYTHONUNBUFFERED=1 timeout $(to 90 20) python3 ../benches/trace_forward.py > $OUT/r/trace_$v.txt 2>&1
  echo "== trace $v rc $? at $(el) s"
  grep -h "^RESULT trace\|Error\|Traceback\|expected" $OUT/r/trace_$v.txt | cut -c1-200 | head -14
done
echo "total $(el) s"

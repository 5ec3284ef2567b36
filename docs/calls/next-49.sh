#!/usr/bin/env bash
# Forty-eighth session's call (any card): the FP8 forward at EP = R on emulated ranks (b118 = main cc690bf + the ep
# bench's FP8 lines: ep tests `fp8_ep*`, rows dispatched as e4m3 codes and 1 x 128 scales, bitwise the single-GPU
# `forward_fp8`; the ep bench, its FP8 forward alternating with the bf16 push / copy forward), then the
# FP8 tile call (next-fp8w192.sh through b117, MODE as given), then the whole ep suite (the dispatch kernel changed).
# Carry [".dev/b117", ".dev/b118"] (~5 min).
# Predicted: the fp8_ep tests pass (bitwise; rel err against the bf16 reference ~2-4e-2, the FP8 format's); the ep
# suite passes unchanged (the bf16 rows' path is the same code with `fp8` 0); the ep bench's FP8 forward
# ~1.2-1.4x the bf16 one (GEMMs ~1.25x as the single-GPU FP8 forward, the dispatch's bytes 0.52x but a quantization
# pass added: dispatch stage level or slightly faster).
O=$OUT; here=$(dirname "$0")
mkdir -p $O/fp8 $O/ep
( OUT=$O/ep; . "$here/prelude.sh" b118; B=b118/main; BOUND=${BOUND:-420}
  t ep 60 300 fp8_ep
  grep -E "FP8 EP|rel err" $OUT/r/t_ep.txt | head -6
  timeout $(to 90 200) $B/ep_bench --bench > $OUT/r/ep_bench.txt 2>&1
  echo "== ep_bench rc $? at $(el) s"; grep -E "RESULT|FAILED|every mode" $OUT/r/ep_bench.txt | cut -c1-420
  tar czf $OUT/r1.tgz -C $OUT r && rm -rf $OUT/r )
OUT=$O/fp8 MODE=${MODE:-full} bash $here/next-fp8w192.sh
( OUT=$O/ep; . "$here/prelude.sh" b118; B=b118/main; BOUND=${BOUND2:-150}
  t ep 140 5
  tar czf $OUT/r2.tgz -C $OUT r && rm -rf $OUT/r )

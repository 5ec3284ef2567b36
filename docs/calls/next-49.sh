#!/usr/bin/env bash
# Forty-eighth session's call (any card): the FP8 forward at EP = R on emulated ranks (b118 = the working tree's ep
# tests: `fp8_ep*`, rows dispatched as e4m3 codes and 1 x 128 scales, bitwise the single-GPU `forward_fp8`), then the
# FP8 tile call (next-fp8w192.sh through b117, MODE as given), then the whole ep suite (the dispatch kernel changed).
# Carry [".dev/b117", ".dev/b118"] (~5 min).
# Predicted: the fp8_ep tests pass (bitwise; rel err against the bf16 reference ~2-4e-2, the FP8 format's); the ep
# suite passes unchanged (the bf16 rows' path is the same code with `fp8` 0).
O=$OUT; here=$(dirname "$0")
mkdir -p $O/fp8 $O/ep
( OUT=$O/ep; . "$here/prelude.sh" b118; B=b118/main; BOUND=${BOUND:-420}
  t ep 60 300 fp8_ep
  grep -E "FP8 EP|rel err" $OUT/r/t_ep.txt | head -6
  tar czf $OUT/r1.tgz -C $OUT r && rm -rf $OUT/r )
OUT=$O/fp8 MODE=${MODE:-full} bash $here/next-fp8w192.sh
( OUT=$O/ep; . "$here/prelude.sh" b118; B=b118/main; BOUND=${BOUND2:-150}
  t ep 140 5
  tar czf $OUT/r2.tgz -C $OUT r && rm -rf $OUT/r )

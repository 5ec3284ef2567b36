#!/usr/bin/env bash
# Forty-seventh session's first call (any card): the FP8 scale-order call (next-fp8w-scale-order.sh, MODE full by
# default), then, on an H200 only, issue 4's layer ratios in rotation (next-rotation.sh through b113's library), so
# that one machine start serves both. Carry [".dev/b111", ".dev/b114", ".dev/b113"] (~4 min, ~6.5 on an H200).
O=$OUT; here=$(dirname "$0")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p $O/scale $O/rot
OUT=$O/scale MODE=${MODE:-full} bash $here/next-fp8w-scale-order.sh
case ${FORCE_GPU:-$gpu} in
  *H200*) OUT=$O/rot ROT=b113 BOUND=${ROT_BOUND:-330} bash $here/next-rotation.sh;;
  *) echo "not an H200 ($gpu): no rotation";;
esac

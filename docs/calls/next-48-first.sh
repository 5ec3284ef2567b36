#!/usr/bin/env bash
# Forty-eighth session's first call (any card): the FP8 tile calls (next-fp8w192.sh: the 128 x 192 kernels and the
# wide kernel's `_ahead`, MODE full by default), then, on an H200 only, issue 4's layer ratios in rotation
# (next-rotation.sh through b113's library), so that one machine start serves both. Carry [".dev/b117",
# ".dev/b113"] (~3.5 min, ~6 on an H200).
O=$OUT; here=$(dirname "$0")
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p $O/fp8 $O/rot
OUT=$O/fp8 MODE=${MODE:-full} bash $here/next-fp8w192.sh
case ${FORCE_GPU:-$gpu} in
  *H200*) OUT=$O/rot ROT=b113 BOUND=${ROT_BOUND:-300} bash $here/next-rotation.sh;;
  *) echo "not an H200 ($gpu): no rotation";;
esac

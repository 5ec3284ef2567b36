#!/usr/bin/env bash
# The thirty-seventh session's first call, when it is not known which card comes: on an H200 issue 4's done-when
# (next-done-when.sh, b68: the figures need the H200), on any other card the L2 hints (next-l2-gather.sh,
# b69: any card decides them; the H100's done-when figures are from 2026-12-05j). The second call on the same warm
# machine runs the other one. Carry [".dev/b68", ".dev/b69"].
d=$(dirname "$0")
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-done-when.sh"; bash "$d/next-done-when.sh"
else
  echo "pick: not an H200 -> next-l2-gather.sh"; bash "$d/next-l2-gather.sh"
fi

#!/usr/bin/env bash
# The thirty-ninth session's first call, the card not known: on an H200 issue 4's done-when (next-done-when.sh,
# b68: the figures need the H200); on any other card the gathering weight-gradient diagnosis
# (next-kgather-diag.sh, b67: any card decides it). Carry [".dev/b67", ".dev/b68"].
d=$(dirname "$0")
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-done-when.sh"; bash "$d/next-done-when.sh"
else
  echo "pick: not an H200 -> next-kgather-diag.sh"; bash "$d/next-kgather-diag.sh"
fi

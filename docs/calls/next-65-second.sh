#!/usr/bin/env bash
# Fifty-seventh session's second call, on the machine the first left warm: next-64-any.sh without its shared-layer
# part (next-65-first.sh ran it). Carry [".dev/b141", ".dev/b142"]. On an H200 issue 4's figure set
# (next-done-when.sh on b141); on an H100 SonicMoE's Figure 14 shapes through the bindings (next-sonic-fig14.sh on
# b142). Predictions: next-64-any.sh's head.
n=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU $n"
d=$(dirname "$0")
case "$n" in
  *H200*) DW=b141 BOUND=${BOUND:-560} bash $d/next-done-when.sh ;;
  *) BDIR=b142 KEYS="sfg-30b-256 sfg-120b-512 sfg-7b-256 sfg-1b-256" BOUND=${BOUND:-560} bash $d/next-sonic-fig14.sh ;;
esac

#!/usr/bin/env bash
# Fifty-sixth session, whatever card comes (carry [".dev/b141"] = main 63f0ed5's benches and tests): on an H200 issue
# 4's figure set (next-done-when.sh on b141: the layer against PyTorch's, each GEMM against cuBLAS and
# torch._grouped_mm, ~9 min); on an H100 main's GPU tests with dx's combine by the rule, then the 7B n=256 step and
# SonicMoE's two top-16 shapes (next-63-tests.sh, ~6-9 min).
n=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU $n"
d=$(dirname "$0")
case "$n" in
  *H200*) DW=b141 BOUND=${BOUND:-560} bash $d/next-done-when.sh ;;
  *) BOUND=${BOUND:-560} bash $d/next-63-tests.sh ;;
esac

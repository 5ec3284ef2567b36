#!/usr/bin/env bash
# Sixtieth session: one call whatever card comes. On an H200: issue 4's figure set (next-done-when.sh on b138 =
# main 63e080c's layer and gemm benches). Otherwise: next-60-narrow.sh (b139: the narrow SwiGLU backward's tests
# and A/B), next-60-pair.sh (b137, b135), then next-small-i.sh (b136) within what is left of ~${TOTAL:-480} s.
# Carry [".dev/b138", ".dev/b139", ".dev/b137", ".dev/b135", ".dev/b136"].
t0=$(date +%s); O=$OUT; d=$(dirname "$0")
n=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU $n"
case "$n" in
  *H200*) DW=b138 BOUND=${DWB:-540} bash $d/next-done-when.sh ;;
  *) mkdir -p $O/n $O/p $O/s
     OUT=$O/n BOUND=${NB:-230} bash $d/next-60-narrow.sh
     echo "== narrow took $(( $(date +%s) - t0 )) s"
     OUT=$O/p bash $d/next-60-pair.sh
     left=$(( ${TOTAL:-480} - ($(date +%s) - t0) )); echo "== pair done at $(( ${TOTAL:-480} - left )) s"
     (( left > 60 )) && OUT=$O/s BOUND=$left bash $d/next-small-i.sh ;;
esac
echo "== all $(( $(date +%s) - t0 )) s"

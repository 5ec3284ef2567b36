#!/usr/bin/env bash
# Fifty-fifth session's list in one call, whatever card comes: (1) next-61.sh (b140 = main cb6f67c: dx's combine
# A/B at 7B / 1.4B n=256 and Qwen3-Next, the movers' prefetch, the narrow SwiGLU backward; their tests) within
# ${AB:-360} s; (2) next-limit-2g.sh (b137: the 2^32 limit's GPU test; land docs/wip/limit-2g.patch if it passes)
# if ~150 s are left of ${TOTAL:-560}; (3) on an H200, issue 4's figure set (next-done-when.sh on b138) in what is
# left. Carry [".dev/b140", ".dev/b137", ".dev/b138"].
t0=$(date +%s); O=$OUT; d=$(dirname "$0")
n=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU $n"
mkdir -p $O/a $O/l $O/f
OUT=$O/a BOUND=${AB:-360} bash $d/next-61.sh
left=$(( ${TOTAL:-560} - ($(date +%s) - t0) )); echo "== next-61 done, $left s left"
(( left > 150 )) && OUT=$O/l bash $d/next-limit-2g.sh
left=$(( ${TOTAL:-560} - ($(date +%s) - t0) )); echo "== limit-2g done, $left s left"
dw=b138; [ -d .dev/b138 ] || dw=b140   # b140 (main's benches) when b138 is not carried: the same default kernels
case "$n" in *H200*) (( left > 120 )) && OUT=$O/f DW=$dw BOUND=$left bash $d/next-done-when.sh ;; esac
echo "== all $(( $(date +%s) - t0 )) s"

#!/usr/bin/env bash
# The forty-first session's first call, the card not known. On an H200: issue 4's done-when on main's build
# (`DW=b77 next-done-when.sh`: both the per-forward and the back-to-back ratios). On any other card: the forward's
# kernels on the GPU's clock (next-trace.sh, b80), then route_fused as a cooperative launch (next-route-coop.sh, b79)
# under what is left of the call's 590 s. Carry [".dev/b77", ".dev/b79", ".dev/b80"] (23 MiB).
d=$(dirname "$0"); t0=$(date +%s)
if nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200; then
  echo "pick: H200 -> next-done-when.sh (b77)"; DW=b77 bash "$d/next-done-when.sh"
else
  echo "pick: not an H200 -> next-trace.sh (b80), next-route-coop.sh (b79)"
  O=$OUT
  OUT=$O/trace BOUND=200 bash "$d/next-trace.sh"
  left=$(( 590 - ($(date +%s) - t0) )); (( left > 400 )) && left=400
  echo "route-coop bound $left s"
  OUT=$O/coop BOUND=$left bash "$d/next-route-coop.sh"
fi

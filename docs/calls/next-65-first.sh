#!/usr/bin/env bash
# Fifty-seventh session's first call, either card: next-65-ep.sh (b144, ~1.5 min) then next-64-shared.sh (b143,
# b142, ~1.5 min). Carry [".dev/b144", ".dev/b143", ".dev/b142"].
d=$(dirname "$0"); O=$OUT; mkdir -p $O/e $O/s
OUT=$O/e bash $d/next-65-ep.sh
OUT=$O/s bash $d/next-64-shared.sh

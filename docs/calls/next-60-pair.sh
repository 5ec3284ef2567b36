#!/usr/bin/env bash
# Sixtieth session: the two short calls the fifty-third prepared, in one call. (1) next-limit-2g.sh (b137: the
# layer_backward test of docs/wip/limit-2g.patch past 2^31 elements), (2) next-final-53.sh (b135: main's
# side-copy tests, the Python test, the 30B Function-keeping-z against the z-keeping operators). Carry
# [".dev/b137", ".dev/b135"] (~4 min). Predictions as in each script.
O=$OUT; d=$(dirname "$0")
mkdir -p $O/a $O/b
OUT=$O/a bash $d/next-limit-2g.sh
echo "== limit-2g done"
OUT=$O/b bash $d/next-final-53.sh
echo "== final-53 done"

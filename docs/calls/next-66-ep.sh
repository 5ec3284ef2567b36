#!/usr/bin/env bash
# Fifty-eighth session: main's EP tests after check()'s restructure (f70f5b8: every rank's words read first, then
# `interval_errors`; no error queued twice). b147 = main's ep and graph test binaries (rebuild: `BDIR=$PWD/.dev/b147
# bash docs/calls/2026-12-04c-build.sh main ep graph`). Carry [".dev/b147"]. ~1 min; chain it after
# next-66-gather.sh on the warm machine.
# Predicted: ep 44/44 (the bad-id tests and the withheld-rank timeouts read through interval_errors), graph_ep 7/7
# (the replay mismatch reported as Error::Mismatch).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b147
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-150}
B=b147/main
t ep 100 40
t graph 40 0 graph_ep
echo "total $(el) s"

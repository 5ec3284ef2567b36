#!/usr/bin/env bash
# Fifty-seventh session: one EpLayer for many model layers (the backward of an older forward routes again and
# sends its x rows with dy: `EpParams::resend_x`). b144 = main's ep test binary with the change (rebuild: `BDIR=
# $PWD/.dev/b144 bash docs/calls/2026-12-04c-build.sh main ep`). Carry [".dev/b144"]. ~1.5 min.
# Predicted: ep all pass (41 + the four new `*one_layer_serves_two_model_layers*`, 45 less the one retired:
# `backward_needs_the_latest_forward` became the resend); every backward bitwise its model layer's own twin.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b144
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-150}
B=b144/main
t ep 40 60 two_model_layers
grep -E "every backward bitwise|rel err" $OUT/r/t_ep.txt | head -12 | cut -c1-200
mv $OUT/r/t_ep.txt $OUT/r/t_ep_new.txt
t ep 100 0
echo "total $(el) s"

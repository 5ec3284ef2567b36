#!/usr/bin/env bash
# Prepared in the thirty-third session: main with `Gather::InProducer` the default (b60 = that session's last main):
# layer_forward whole and tests/ep.rs whole (in 2026-12-05h their in-producer forms, layer_backward with the knob
# and the graph suite passed; these two did not run whole with it as the default), then layer_backward and graph whole.
# Carry [".dev/b60"] (~7.5 min). A failure that passes with MEGAMOE_GATHER=overlapped: make `Gather::default_for`
# give Overlapped again (host/src/layer.rs) until understood.
. "$(dirname "$0")/prelude.sh" b60
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b60/main
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t layer_forward 150 320
t ep 150 170
t layer_backward 150 60
t graph 120 0
echo "total $(el) s"

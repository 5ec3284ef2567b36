#!/usr/bin/env bash
# Prepared in the fifty-third session (not run: the device time ran out): the element limit raised from 2^31 to
# 2^32 (docs/wip/limit-2g.patch, `git am` onto main; the audit docs/wip/offsets-2g.md found every kernel offset into
# the routed rows an unsigned 32-bit element count widened before its pointer add). b137 = that branch's release
# layer_backward test binary; carry [".dev/b137"] (~2 min). Rebuild: `git am docs/wip/limit-2g.patch`, then
# `cargo test --release --test layer_backward --no-run` and copy the binary as the other scripts do.
# The test: 34000 tokens at top-16, H = 4096, I = 256, 32 experts (2.2e9 routed-row elements, past 2^31): the
# whole step, then y, dx and dtopk of 24 tokens routed to the last expert (the highest offsets) against the f64
# reference of those tokens alone. Predicted: passes (~5e-3 relative, as every layer test); if it fails, the audit
# missed a site: the failing output names which.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b137
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-200}
B=b137/main
t layer_backward 150 20 past_2g
echo "total $(el) s"

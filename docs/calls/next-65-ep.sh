#!/usr/bin/env bash
# Fifty-seventh session: one EpLayer for many model layers (the backward of an older forward routes again and
# sends its x rows with dy: `EpParams::resend_x`). b144 = main's ep test binary with the change (rebuild: `BDIR=
# $PWD/.dev/b144 bash docs/calls/2026-12-04c-build.sh main ep graph`, plus the ep bench: `cargo bench --bench ep --no-run`'s
# executable as b144/main/ep_bench, stripped, gzipped). Carry [".dev/b144"]. ~3.5 min.
# Predicted: ep all pass (41 + the four new `*one_layer_serves_two_model_layers*`, 45 less the one retired:
# `backward_needs_the_latest_forward` became the resend); every backward bitwise its model layer's own twin; graph's
# EP tests 6/6 with `graph_ep4_one_layer_two_model_layers` (forward A, forward B, backward B, backward A captured,
# replays bitwise a layer each) and `graph_ep_replay_between_forward_and_backward_is_reported` (Error::Mismatch). The ep
# bench's new line (H100 / H200, 30B EP = 8 emulated, 2048 tokens a rank, 131072 rows): the older forward's backward
# +0.25-0.4 ms over the latest's (537 MB more dispatched through one HBM at ~2-3 TB/s of copy, plus 8 route launches
# and a count round), ~1.1x.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b144
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-300}
B=b144/main
t ep 40 60 two_model_layers
grep -E "every backward bitwise|rel err" $OUT/r/t_ep.txt | head -12 | cut -c1-200
mv $OUT/r/t_ep.txt $OUT/r/t_ep_new.txt
t graph 30 150 graph_ep
t ep 100 ${BENCH_S:-130}
if [ "${BENCH_S:-130}" -gt 0 ]; then
  timeout $(to ${BENCH_S:-130} 0) $B/ep_bench --bench > $OUT/r/ep_bench.txt 2>&1
  echo "== ep bench rc $? at $(el) s"; grep -E "^RESULT|FAILED|every mode" $OUT/r/ep_bench.txt | cut -c1-420
fi
echo "total $(el) s"

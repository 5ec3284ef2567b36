#!/usr/bin/env bash
# Prepared in the twenty-sixth session (not run). The rest of branch energy-both's GPU tests (skip-idle + a-maps
# merged; next-energy-both.sh runs grouped_gemm whole and layer_backward's both_knobs_*): each knob alone in the
# layer (layer_forward and layer_backward `skip_idle_*`, `a_maps_*`: bitwise the knob off) and graph whole (incl.
# `graph_a_maps_*`: a captured step with per-expert maps replays bitwise the eager shared-map one on new routing).
# Predicted: all pass. Binaries .dev/b43/both (as next-energy-both.sh). Command `bash docs/calls/next-energy-tests.sh`,
# carry [".dev/b43"] (~3-4 min).
. "$(dirname "$0")/prelude.sh" b43
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
t() { local n=$1 to=$2 tag=$3; shift 3; timeout $to b43/both/$n "$@" --include-ignored --test-threads=1 > $OUT/r/t_$n$tag.txt 2>&1
  echo "== $n$tag rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n$tag.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_$n$tag.txt | cut -c1-300 | head -6; }
t layer_forward 60 _knobs skip_idle a_maps
t layer_backward 150 _knobs skip_idle a_maps
t graph 120 ""
echo "total $(el) s"

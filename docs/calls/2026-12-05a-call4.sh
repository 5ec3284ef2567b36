#!/usr/bin/env bash
# Twenty-sixth session, call 4: the landing candidate (branch land: main 1372aaf + the weight gradients' run-time
# cluster pairs (docs/wip/wgrad-cluster-pairs-runtime.patch) + docs/wip/gemm-guards.patch + the clusters made the
# default weight-gradient schedule). Binaries .dev/b39/land (`BDIR=.dev/b39 bash docs/calls/2026-12-04c-build.sh
# land grouped_gemm layer_backward ep graph fp8` on that branch). The tests whole with the new default (every
# layer / EP / graph test now runs the cluster weight gradients; layer_backward's cluster test compares them with
# the single-CTA schedule bit for bit), then the 30B layer with MEGAMOE_WGRAD_SCHED=dynamic against the default.
# (fp8's tests not here: its weight gradients run Dynamic under the clusters knob; they passed on b38 in call 2.)
# Predicted: every test passes; the layer's forward + backward (z saved) 0.5-2% faster with the default than with
# dynamic (the weight gradients' 0-2.4% of ~2.4 ms in short runs), inside the runs' spread.
. "$(dirname "$0")/prelude.sh" b39
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
t() { local n=$1 to=$2; shift 2; timeout $to b39/land/$n "$@" --include-ignored --test-threads=1 > $OUT/r/t_$n.txt 2>&1
  echo "== $n rc $? at $(el) s: $(grep 'test result' $OUT/r/t_$n.txt)"
  grep -E "FAILED|panicked|\.\.\. $" $OUT/r/t_$n.txt | cut -c1-300 | head -6; }
t grouped_gemm 130
t layer_backward 160
t ep 30
t graph 80
for v in dynamic clusters; do
  f=$OUT/r/layer_${v}_$(el).txt
  MEGAMOE_WGRAD_SCHED=$v MEGAMOE_BENCH_ONLY=30B timeout 45 b39/land/layer --bench > $f 2>&1
  echo "== layer 30B wgrad $v rc $? at $(el) s"
  grep -E "^RESULT megamoe (forward Qwen|forward\+backward \(z (saved|recomputed)\) |forward\+backward \(z saved, bf16 weight gradients\) Qwen)" $f | cut -c1-200
done
echo "total $(el) s"

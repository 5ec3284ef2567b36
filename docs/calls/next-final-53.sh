#!/usr/bin/env bash
# Fifty-third session, last call: main after the side-copy rule and the op path's fix (b135 = main's
# libmegamoe_capi.so and layer_forward test binary): layer_forward's side-copy tests on main's kernels (two of them
# have run only on the refuted copy's builds), the Python test whole (its small shapes now take the gather pass by
# the rule), then the 30B step through the autograd Function keeping z against the z-keeping custom operators,
# alternating in four processes. Carry [".dev/b135"]. ~2 min. Predicted: 4/4, all passed; op-z within ~1% of z
# (the routing again, ~17 us).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b135
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-200}
B=b135/main
t layer_forward 60 100 side_copy
export MEGAMOE_LIB=$PWD/b135/capi/libmegamoe_capi.so
PYTHONUNBUFFERED=1 timeout $(to 80 40) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test rc $? at $(el) s: $(tail -1 $OUT/r/torch_binding.txt | cut -c1-120)"
for r in 1 2; do for mode in z op-z; do
  f=$OUT/r/trace_30B_${mode}_$r.txt
  PYTHONUNBUFFERED=1 timeout $(to 25 3) python3 ../benches/trace_step.py 30B $mode > $f 2>&1
  echo "== 30B $mode r$r rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-60)"
done; done
echo "total $(el) s"

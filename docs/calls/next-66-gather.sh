#!/usr/bin/env bash
# Fifty-eighth session (not run: the session's device budget ran out on refused starts). The gathering weight
# gradients (docs/wip/wgrad-gather.patch, branch wgrad-gather2 fe8cada: MEGAMOE_WGRAD_GATHER=1 dW2 gathers dy's rows,
# =2 dW1 also gathers x's rows, so neither the dh kernel's dy write-out nor x's gather pass / dx's side copy runs;
# b146 = the branch's libmegamoe_capi.so and layer_forward / layer_backward / fp8 test binaries; rebuild from the
# patch in a worktree if .dev is gone), their GPU tests, then the step traced back to back (trace_step.py KEY z, the
# kernels on the GPU's clock) at SonicMoE's top-16 shape 30B n=256 (H 4096, I 256, E 256, k 16, T 32768) with the
# three modes alternating twice and one trace with MEGAMOE_SIDE_COPY=off, at 7B n=256 and at Qwen3-30B (where the
# dW2 gather lost, 0.96-0.97x), and the Python test (main's python: MoE's new defaults). Carry [".dev/b146"],
# timeout ~430 (~6-7 min).
# Predicted at 30B n=256 (step 25352 us, 2026-12-07k): =1 dh 4157 -> ~2700-3000 us (no 4.3 GB dy write-out), dW2
# +0..+600: 1.03-1.06x; =2 also dx 7253 -> ~4000 (plain dx, no side copy), dW1 +0..+900 (single CTA, gathered x):
# 1.08-1.15x; side copy off 1.01-1.03x. At 30B (I 768, k 8): =1 0.96-0.99x as measured in the 35th, =2 ~0.97-1.0x.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b146
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-420}
B=b146/main
t layer_backward 90 260 wgrad_gather
t layer_forward 90 190 in_producer_wgrad_gather
export MEGAMOE_LIB=$PWD/b146/capi/libmegamoe_capi.so
tr() { local key=$1 tag=$2; shift 2
  f=$OUT/r/trace_${key}_$tag.txt
  env "$@" PYTHONUNBUFFERED=1 timeout $(to 25 5) python3 ../benches/trace_step.py $key z > $f 2>&1
  echo "== $key $tag rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-90)"
  grep -h "Traceback\|Error" $f | head -3
  grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -8 | cut -c1-90; }
for round in 1 2; do
  for m in 0 1 2; do tr sfg-30b-256 g${m}_$round MEGAMOE_WGRAD_GATHER=$m; done
done
tr sfg-30b-256 sidecopy_off MEGAMOE_SIDE_COPY=off
i=0; for m in 0 2 0 2; do i=$((i + 1)); tr sfg-7b-256 g${m}_$i MEGAMOE_WGRAD_GATHER=$m; done
for m in 0 1 2; do tr 30B g$m MEGAMOE_WGRAD_GATHER=$m; done
PYTHONUNBUFFERED=1 timeout $(to 60 0) python3 ../python/test_megamoe_torch.py > $OUT/r/torch_binding.txt 2>&1
echo "== python test rc $? at $(el) s: $(tail -1 $OUT/r/torch_binding.txt | cut -c1-120)"
grep -E "FAIL|default with|Traceback|Error" $OUT/r/torch_binding.txt | head -6 | cut -c1-200
echo "total $(el) s"

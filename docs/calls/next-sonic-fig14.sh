#!/usr/bin/env bash
# Prepared in the fifty-third session: the layer at SonicMoE's fine-grained Figure 14 shapes (benches/torch_common.py
# `sfg-*`: its paper's H100 bf16 configurations, published forward / backward TFLOP/s read off the chart) against
# PyTorch's torch._grouped_mm layer (benches/torch_rotation.py KEY, which checks y and every gradient first, and now
# prints the backward as the step less the forward, SonicMoE's convention), the step's kernels on the GPU's clock
# (trace_step.py KEY z), then the z-keeping custom operators' trace (next-op-trace.sh's question) in the same call.
# Any card; carry [".dev/b131"] (main's libmegamoe_capi.so; rebuild as next-torch-z.sh says). ~7-9 min (BOUND=560).
# Predicted (H100): checks pass; ours against SonicMoE's published numbers: at n = 512 (sfg-30b-512, sfg-120b-512)
# level or ahead (Qwen3-30B's 539 / 555 forward / backward, I = 768), at n = 256 (sfg-30b-256, sfg-7b-256,
# sfg-1b-256) behind: GEMM2 and dx run 4-8 k-steps a tile at I = 256, where the cooperative tile's serial epilogue
# weighs most (Qwen3-Next, I = 512: 374 / 363).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b131}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-560}
export MEGAMOE_LIB=$PWD/$BDIR/capi/libmegamoe_capi.so
for key in ${KEYS:-sfg-30b-256 sfg-30b-512 sfg-120b-512 sfg-7b-256 sfg-1b-256}; do
  PYTHONUNBUFFERED=1 timeout $(to 90 120) python3 ../benches/torch_rotation.py $key > $OUT/r/rotation_$key.txt 2>&1
  echo "== rotation $key rc $? at $(el) s"
  grep -h "^check\|forward alone\|forward+backward\|step less\|FAILED\|Error\|Traceback" $OUT/r/rotation_$key.txt | sed -E 's/RESULT rotation //; s/ \(medians of.*//' | cut -c1-260
  PYTHONUNBUFFERED=1 timeout $(to 60 100) python3 ../benches/trace_step.py $key z > $OUT/r/trace_$key.txt 2>&1
  echo "== trace $key rc $? at $(el) s"
  grep -h "^RESULT trace-step .*: span" $OUT/r/trace_$key.txt | sed -E 's/RESULT trace-step //' | cut -c1-200
  grep -h "^RESULT trace-step kernel .*megamoe" $OUT/r/trace_$key.txt | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -8 | cut -c1-120
done
for mode in z op-z op; do
  f=$OUT/r/trace_30B_$mode.txt
  PYTHONUNBUFFERED=1 timeout $(to 40 5) python3 ../benches/trace_step.py 30B $mode > $f 2>&1
  echo "== trace 30B $mode rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $f | sed -E 's/.*: span/span/' | cut -c1-120)"
  grep -h "FAILED\|Traceback\|Error" $f | head -3
  grep -h "^RESULT trace-step kernel .*megamoe" $f | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -12 | cut -c1-100
done
echo "total $(el) s"

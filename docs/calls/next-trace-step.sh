#!/usr/bin/env bash
# Forty-second session: the layer's step on the GPU's clock, ours and PyTorch's (benches/trace_step.py: every
# kernel of a forward + backward, z saved, bf16 weight gradients, against the torch._grouped_mm layer's autograd
# step), at 30B then 235B. b87 = main ecddda2's release libmegamoe_capi.so (`mkdir -p .dev/b87/capi && cargo build
# --release -p megamoe-capi && cp target/release/libmegamoe_capi.so .dev/b87/capi/ && strip .dev/b87/capi/*.so &&
# gzip -f .dev/b87/capi/*.so`). Carry [".dev/b87"] (~2-3 min, any card).
# Predicted (30B, H200; H100 ~1.3x longer): our step ~7.2 ms: forward ~2.35 (GEMM1 + SwiGLU ~1.3, GEMM2 ~0.7,
# combine ~0.15), the dh + SwiGLU backward with dy's gather and write-out ~1.0, dx ~0.7, dW2 ~0.7, dW1 with dx's sum
# ~1.4, the rest (routing, maps, memsets, dtopk) < 0.1, gaps < 0.05; PyTorch's ~13.9 ms, half of it or more
# outside its six grouped GEMMs.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b87
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-400}
export MEGAMOE_LIB=$PWD/b87/capi/libmegamoe_capi.so
for shape in 30B 235B; do
  PYTHONUNBUFFERED=1 timeout $(to 150 0) python3 ../benches/trace_step.py $shape > $OUT/r/trace_step_$shape.txt 2>&1
  echo "== trace_step $shape rc $? at $(el) s"
  grep -h "^RESULT\|^check\|FAILED\|Error\|Traceback" $OUT/r/trace_step_$shape.txt | cut -c1-220
done
echo "total $(el) s"

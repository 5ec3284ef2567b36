#!/usr/bin/env bash
# Prepared in the fifty-second session: the layer at other models' MoE shapes against PyTorch's torch._grouped_mm
# layer, one process each, in rotation (benches/torch_rotation.py KEY: y, dx, dtopk, dW1, dW2 checked against
# PyTorch's on the same inputs first), then ours and PyTorch's step kernel by kernel (benches/trace_step.py KEY z).
# Shapes (benches/torch_common.py SHAPES): 30B (the baseline of this card), next (Qwen3-Next-80B-A3B: H 2048, I 512,
# E 512, top-10), dsv2lite (DeepSeek-V2-Lite: 2048, 1408, 64, top-6), dsv3ep8 (DeepSeek-V3's 32 experts a GPU at
# EP = 8: 7168, 2048, 32, top-8), gptoss (gpt-oss-120b's shape: 2880, 2880, 128, top-4), sonic (SonicMoE's 7B
# configuration: 4096, 2048, 64, top-4, T = 32768). Any card; carry [".dev/b127"] (main's libmegamoe_capi.so;
# rebuild as next-torch-z.sh says), BDIR=bNN for another build. ~6-8 min (BOUND=560).
# Predicted (H100): every check passes (rel diffs ~3e-3 to 1e-2); the step against PyTorch's: 30B ~2.2x (the card's
# rotation), next 2.3-3.0x (small experts: PyTorch's glue dominates), dsv2lite ~2.0x, gptoss 1.6-2.0x, dsv3ep8 and
# sonic 1.4-1.6x (large GEMMs, as 235B's 1.5x); our forward at sonic 520-600 TFLOP/s against SonicMoE's published
# ~600 (H100). Partial tiles: I = 512 and 1408 are not multiples of the SwiGLU kernels' 192 columns (3 tiles for
# 2.67, 8 for 7.33): the trace shows whether GEMM1 + SwiGLU and dh + SwiGLU lose more than that.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b127}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-560}
export MEGAMOE_LIB=$PWD/$BDIR/capi/libmegamoe_capi.so
for key in ${KEYS:-30B next dsv2lite gptoss dsv3ep8 sonic}; do
  PYTHONUNBUFFERED=1 timeout $(to 90 20) python3 ../benches/torch_rotation.py $key > $OUT/r/rotation_$key.txt 2>&1
  echo "== rotation $key rc $? at $(el) s"
  grep -h "^check\|forward alone\|forward+backward\|FAILED\|Error\|Traceback" $OUT/r/rotation_$key.txt | sed -E 's/RESULT rotation //; s/ \(medians of.*//' | cut -c1-260
  PYTHONUNBUFFERED=1 timeout $(to 60 10) python3 ../benches/trace_step.py $key z > $OUT/r/trace_$key.txt 2>&1
  echo "== trace $key rc $? at $(el) s"
  grep -h "^RESULT trace-step .*: span" $OUT/r/trace_$key.txt | sed -E 's/RESULT trace-step //' | cut -c1-200
  grep -h "^RESULT trace-step kernel .*megamoe" $OUT/r/trace_$key.txt | sed -E 's/RESULT trace-step kernel [^:]*: //' | head -10 | cut -c1-120
done
echo "total $(el) s"

#!/usr/bin/env bash
# Prepared in the twenty-ninth session (not run). The dh + SwiGLU backward misses issue 4's 0.9 (0.79-0.81 of cuBLAS's
# dense dh alternating) while doing more than that dense dh: it also reads z and writes dz (and, in the layer, s h).
# docs/NOTES.md estimated the unfused two-step form at ~0.93 ms (dense dh 527 us + a ~1.2 GB pass at ~400 us) against
# the fused 750 us: an estimate. This call measures it: the gemm bench (b50/main/gemm, both shapes: our fused
# `bwd dh + SwiGLU backward (dz, dtopk partials)` and cuBLAS's dense dh, alternating), then benches/torch_dswiglu.py
# (the same routing counts: cuBLAS dense dh and torch._grouped_mm dh, the SwiGLU backward as one torch.compile'd
# (Triton) pass and eager, each with and without s h, and each dh + the compiled pass back to back; a copy of the
# pass's bytes as the ceiling, and HBM writes alone (fill_) and reads alone (sum) of the same buffer: is the dy
# gather's ~2.3 TB/s of writes the device's write ceiling, as the ninth session inferred but never measured?), then the
# gemm bench at 30B again (ours in the same state after the torch run).
# Predicted (30B): dense dh 530-650 us (ncu at base clocks 527; alternating under the cap ~650 beside our 834, 0.78,
# RESULTS 2026-12-04d); compiled pass without s h ~1.0 GB at 3.0-3.6 TB/s = 280-340 us, with s h ~1.2 GB = 340-400
# us; dense dh + compiled pass back to back 850-1000 us without s h, i.e. the two-step form at 0.58-0.66 of the
# dense dh's rate where the fused kernel is at ~0.8: fused 1.15-1.3x faster than unfused. If the
# compiled pass comes in under ~230 us (copy-bound, and the pair under ~760 us), the fused kernel's epilogue is the
# loss and 3e/3c in NOTES are worth more. Eager PyTorch: several passes, 2-3x the compiled one.
# Command `bash docs/calls/next-dswiglu-unfused.sh`, carry [".dev/b50"] (~4 min, self-limited to 420 s).
. "$(dirname "$0")/prelude.sh" b50
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $OUT/r/gpu.txt
MEGAMOE_GEMM_COUNTS_DIR=$OUT/r timeout 150 b50/main/gemm --bench > $OUT/r/gemm1.txt 2>&1
echo "== gemm (both shapes) rc $? at $(el) s"; alt_summary $OUT/r/gemm1.txt
PYTHONUNBUFFERED=1 timeout $(( 360 - $(el) )) python3 ../benches/torch_dswiglu.py $OUT/r > $OUT/r/torch_dswiglu.txt 2>&1
echo "== torch_dswiglu rc $? at $(el) s"; grep -E "RESULT|FAILED|NOT AVAILABLE|Error" $OUT/r/torch_dswiglu.txt | head -40
left=$(( 415 - $(el) )); [ $left -gt 45 ] && left=45
if [ $left -gt 10 ]; then
  MEGAMOE_BENCH_ONLY=30B timeout $left b50/main/gemm --bench > $OUT/r/gemm2.txt 2>&1
  echo "== gemm 30B again rc $? at $(el) s"; alt_summary $OUT/r/gemm2.txt
fi
echo "total $(el) s"

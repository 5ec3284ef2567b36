#!/usr/bin/env bash
# Prepared in the fifty-second session: the bf16 weight gradients with the whole tile staged (`_ws` kernels:
# 3-stage ring, four staging boxes a consumer warp, so a tile's stores drain under the next tile's main loop;
# `MEGAMOE_WGRAD_STAGING=tile`), any card. b128 = main + the twins: grouped_gemm and layer_backward test binaries
# (release) and libmegamoe_capi.so. Carry [".dev/b128"] (~8 min, BOUND=570).
# 1. grouped_gemm's wgrad tests (the new wgrad_bf16_whole_tile_staging_agrees: bitwise the two-box kernels under
#    both schedules), layer_backward whole with MEGAMOE_WGRAD_STAGING=tile (every backward on the twins, against
#    the f64 reference).
# 2. trace_step.py z (bf16 weight gradients) at next (Qwen3-Next-80B-A3B: 320 rows an expert) and 30B, boxes and
#    tile alternating in two rounds: the weight-gradient kernel's time a step.
# 3. torch_rotation.py at next and 30B under each: the step against PyTorch's.
# Predicted: tests pass; the weight gradients at next 2556 -> 1700-2000 us (the two-box epilogue waits ~2.3 us a
# tile for its stores: ~850 us over 372 tiles a block; less what the shallower ring costs), the step 8.5 -> 7.8-8.0
# ms (1.07-1.10x); at 30B the bf16 weight gradients 1905 -> 1750-1900 us (main loop per tile ~13 us against a ~1.3
# us wait, the ring's depth against it: -8% to level).
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
BDIR=${BDIR:-b128}
. "$(dirname "$0")/prelude.sh" $BDIR
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-570}
B=$BDIR/main
t grouped_gemm 150 400 wgrad
MEGAMOE_WGRAD_STAGING=tile t layer_backward 150 260
export MEGAMOE_LIB=$PWD/$BDIR/capi/libmegamoe_capi.so
for round in 1 2; do
  for key in next 30B; do
    for st in boxes tile; do
      MEGAMOE_WGRAD_STAGING=$st PYTHONUNBUFFERED=1 timeout $(to 40 20) python3 ../benches/trace_step.py $key z > $OUT/r/trace_${key}_${st}_$round.txt 2>&1
      echo "== trace $key $st round $round rc $? at $(el) s: $(grep -h "^RESULT trace-step .*megamoe.*: span" $OUT/r/trace_${key}_${st}_$round.txt | sed -E 's/.*: span/span/' | cut -c1-60); $(grep -h "^RESULT trace-step kernel .*grouped_wgrad" $OUT/r/trace_${key}_${st}_$round.txt | sed -E 's/RESULT trace-step kernel [^:]*: //' | cut -c1-90)"
    done
  done
done
for key in next 30B; do
  for st in boxes tile; do
    MEGAMOE_WGRAD_STAGING=$st MEGAMOE_BENCH_HEAT=2 PYTHONUNBUFFERED=1 timeout $(to 60 5) python3 ../benches/torch_rotation.py $key > $OUT/r/rotation_${key}_$st.txt 2>&1
    echo "== rotation $key $st rc $? at $(el) s: $(grep -h "forward+backward" $OUT/r/rotation_${key}_$st.txt | sed -E 's/.*: megamoe/megamoe/; s/ \(medians.*//' | cut -c1-120)"
    grep -h "FAILED\|Traceback" $OUT/r/rotation_${key}_$st.txt | head -3
  done
done
echo "total $(el) s"

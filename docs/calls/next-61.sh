#!/usr/bin/env bash
# Fifty-fifth session: dx's combine by a pass below I = 512 (branch dx-combine, b140 = its tree: layer_forward, fp8,
# grouped_gemm tests, layer and gemm benches; the narrow SwiGLU backward of main included). Carry [".dev/b140"]
# (~6-8 min, BOUND=${BOUND:-540}).
# The layer benches run with MEGAMOE_DX_COMBINE=auto (the rule: the pass below I = 512; unset is the movers), so
# their PHASE lines show the rule's kernels and each "dx summed by ..." line is default / that way (> 1: that way
# faster).
# Predicted: tests pass (bitwise movers, prefetching movers and pass, bf16 and FP8; the narrow kernel's dz bitwise
# the 192 kernel's). At 7B n=256 (1536, 256, T = 24576): the movers' line 0.90-0.94x (the pass faster: the weight
# gradients ~1513 -> ~900 us, the pass +~240 us), PHASE: grouped_wgrad_bf16_mc ~300 + ~560 us and combine_rows
# ~240 against the 07f trace's _mv_mc 558 + 960 (H100). At 1.4B n=256 (768, 256, T = 40960) the movers' line
# 0.88-0.93x. At Qwen3-Next (2048, 512; the rule keeps the movers) the pass's line 0.98-1.02x. The prefetching
# movers (their sum's loads wait on L2, not DRAM: ~1.5-2x the movers' ~0.4 TB/s): at 7B / 1.4B 1.00-1.04x (level
# with or ahead of the pass), at Qwen3-Next 1.00-1.02x. The narrow kernel's line ("SwiGLU backward Ew7", the 192
# kernel alternating) 0.96-0.98x.
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
. "$(dirname "$0")/prelude.sh" b140
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
BOUND=${BOUND:-540}
B=b140/main
t layer_forward 90 250 in_producer_dx_combine in_producer_dy_narrow
t fp8 40 210 backward_fp8_dx_combine
lb() { local tag=$1 sh=$2 dsw=$3
  env MEGAMOE_DX_COMBINE=auto MEGAMOE_DSW=$dsw MEGAMOE_BENCH_SHAPE=$sh MEGAMOE_BENCH_HEAT=1 MEGAMOE_BENCH_PHASES=1 timeout $(to 110 $4) \
    $B/layer --bench > $OUT/r/layer_$tag.txt 2>&1
  echo "== layer $tag ($sh, DSW $dsw) rc $? at $(el) s"
  grep -hE "^RESULT megamoe forward\+backward \(z saved, bf16 weight gradients\)" $OUT/r/layer_$tag.txt | cut -c1-260
  grep -hE "^PHASE" $OUT/r/layer_$tag.txt | grep -E "wgrad|combine_rows|dswiglu" | cut -c1-160 | head -12
  grep -hE "FAILED|panicked|Error" $OUT/r/layer_$tag.txt | head -3; }
lb 7b 1536,256,128,8,24576 ew7n 100
# the weight gradients alone (no movers) at (1536, 256), T = 16384 (the gemm bench's), alternating with cuBLAS:
# predicted ~500-580 TFLOP/s (dW2 ~180-210 us, dW1 ~355-410), against the layer's _mv_mc at 7B scaled to this T:
# 372 + 640 us (H100)
env MEGAMOE_BENCH_SHAPE=1536,256,128,8 MEGAMOE_BENCH_PART=wgrad MEGAMOE_BENCH_HEAT=1 timeout $(to 70 60) \
  $B/gemm --bench > $OUT/r/gemm_wgrad_7b.txt 2>&1
echo "== gemm wgrad 7b rc $? at $(el) s"; alt_of gemm_wgrad_7b
grep -E "^RESULT" $OUT/r/gemm_wgrad_7b.txt | grep -i "dW" | cut -c1-220 | head -8
t grouped_gemm 60 40 dswiglu ew7_dyn
lb 1b 768,256,128,8,40960 ew7n 10
lb next 2048,512,512,10 ew7 5
echo "total $(el) s"

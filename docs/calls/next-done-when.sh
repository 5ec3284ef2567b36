#!/usr/bin/env bash
# Fortieth session: `DW=b77 bash docs/calls/next-done-when.sh`, carry [".dev/b77"], runs it on another build (b77 = main 4adec86
# after the fortieth session: route_fused, the back-to-back forward lines, PyTorch's back-to-back forward; rebuild with
# `BDIR=/work/main/.dev/b77 bash docs/calls/2026-12-04c-build.sh main layer_forward layer_backward graph ep`).
# Prepared in the thirty-fourth session (not run): issue 4's "done when", measured in one call on the H200: the
# layer against PyTorch's (next-headline.sh: medians, 6 s soaks, joules a step), then each GEMM of the layer at
# both shapes against cuBLAS's dense GEMM alternating (benches/gemm.rs) and torch._grouped_mm on the same counts
# (benches/torch_gemm.py). b68 = main ac3aac7 (b65's kernels: main d0c6de8's, both in-producer gathers the default;
# the gemm bench's heat, and since the thirty-sixth session its `RESULT gemm-batched` lines: each weight gradient
# in rotation with cuBLAS's strided-batched GEMM, which writes the same E outputs as ours, and cuBLAS's dense one).
# Then the weight gradients alone with balanced routing (every expert 1024 rows: the batched GEMM's own work), each
# soaked 3 s beside nvidia-smi: joules a launch of ours, cuBLAS batched and cuBLAS dense.
# Carry [".dev/b68"] (~3-4 min: 117 s on an H100 before the batched lines and the soak, bound 565 s). On an H100 the
# ratios hold within the call only (not the issue's).
# Predicted (H200): forward 2.47-2.51x PyTorch, step 2.0-2.05x; M-grouped GEMMs 0.87-0.96 of cuBLAS at 30B except dh
# + SwiGLU (~0.80-0.83); K-grouped bf16 out ~0.85, f32 ~0.73-0.77. cuBLAS batched / dense (the K-grouped target's
# feasibility on the grouped output's bytes, docs/NOTES.md 2026-12-05k): f32 0.76-0.83 (the byte model 0.78-0.81),
# bf16 0.85-0.90 (model 0.88-0.90); ours / batched 0.90-0.97 (random routing), 0.93-1.0 (balanced); under the soak
# the joules a launch of batched over dense within 3% of the model's (dense + ~0.13 J a GB of extra output).
t0=$(date +%s); O=$OUT
echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
DW=${DW:-b68}
OUT=$O/h HEADLINE_BIN=$DW/main bash "$(dirname "$0")/next-headline.sh"
. "$(dirname "$0")/prelude.sh" $DW
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=$DW/main
B0=${BOUND:-565}; BOUND=$(( B0 - ($(date +%s) - t0) )); echo "headline took $(( B0 - BOUND )) s"
MEGAMOE_GEMM_COUNTS_DIR=$OUT/r timeout $(to 330 60) $B/gemm --bench > $OUT/r/gemm.txt 2>&1
echo "== gemm (both shapes) rc $? at $(el) s"
alt_summary $OUT/r/gemm.txt
grep -h "RESULT gemm-batched" $OUT/r/gemm.txt | sed -E 's/RESULT gemm-batched //; s/ \(K-grouped\) M=[0-9]+ N=[0-9]+ K=[0-9]+//' | cut -c1-330
grep -E "FAILED|all written: false|panicked" $OUT/r/gemm.txt | head -4
smi_start
MEGAMOE_BENCH_ROUTING=balanced MEGAMOE_BENCH_PART=wgrad MEGAMOE_BENCH_ONLY=30B MEGAMOE_SOAK=3 MEGAMOE_SOAK_ONLY=dW \
  timeout $(to 120 130) $B/gemm --bench > $OUT/r/gemm_wgrad_balanced.txt 2>&1
echo "== gemm wgrad balanced, soaked rc $? at $(el) s"
smi_stop
alt_summary $OUT/r/gemm_wgrad_balanced.txt
grep -h "RESULT gemm-batched" $OUT/r/gemm_wgrad_balanced.txt | sed -E 's/RESULT gemm-batched //; s/ \(K-grouped\) M=[0-9]+ N=[0-9]+ K=[0-9]+//' | cut -c1-330
energy_of gemm_wgrad_balanced; cat $OUT/r/energy_gemm_wgrad_balanced.txt 2>/dev/null | cut -c1-200
PYTHONUNBUFFERED=1 timeout $(to 120 0) python3 ../benches/torch_gemm.py $OUT/r > $OUT/r/torch_gemm.txt 2>&1
echo "== torch_gemm rc $? at $(el) s"
grep -h "^RESULT" $OUT/r/torch_gemm.txt | cut -c1-200 | head -20
echo "total $(el) s"

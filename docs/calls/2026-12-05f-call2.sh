#!/usr/bin/env bash
# Thirty-first session. The swapped tail tile's correctness on a GPU (never run before): branch swap-scatter =
# swap-tail (docs/wip/swap-tail.patch: the plain bf16 kernels grouped_gemm_bf16_st / grouped_gemm_bt_bf16_st) + the
# row-scattered GEMM2 (grouped_gemm_bf16_scatter_st, EP's) + the 192-column hand-off kernels
# (grouped_gemm_swiglu_ew7_st, _ew7_mv_st: GEMM1 + SwiGLU; grouped_gemm_bt_dswiglu_ew7_st: dh + SwiGLU backward):
# with MEGAMOE_SWAP_TAIL=1 every M-grouped bf16 GEMM of the layer computes an expert's last m-tile (< 128 rows)
# with the operands' roles swapped (docs/wip/swap-ab-tail.md).
# (1) grouped_gemm's swap_tail tests (plain nk / kn, scatter, ew7: against the f64 reference and row by row against
# the ordinary kernel; they print how many elements are bitwise the ordinary kernel's), compute-sanitizer memcheck
# of the plain and ew7 ones, grouped_gemm whole (its helpers were refactored: scatter / swiglu / dswiglu return the
# kernel launched); (2) layer_forward and layer_backward subsets with MEGAMOE_SWAP_TAIL=1 against the reference.
# Predicted: all pass; the bitwise counts below 100% (another wgmma shape sums a k16 step in another order).
# Binaries .dev/b53/st (in the swap-scatter worktree: `BDIR=/work/main/.dev/b53 bash docs/calls/2026-12-04c-build.sh st
# grouped_gemm layer_backward layer_forward`). Command `bash docs/calls/next-swap-tail-tests.sh`, carry
# [".dev/b53"]; ~5 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b53
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b53/st
t grouped_gemm 120 420 swap_tail --nocapture
grep -hE "swapped tail|rel err" $OUT/r/t_grouped_gemm.txt | head -40
mv $OUT/r/t_grouped_gemm.txt $OUT/r/t_grouped_gemm_swap.txt
for k in kn_swap_tail_matches_the_reference ew7_swap_tail_matches_the_reference; do
  timeout $(to 60 330) compute-sanitizer --tool memcheck --error-exitcode 3 $B/grouped_gemm $k --exact \
    --include-ignored --test-threads=1 > $OUT/r/memcheck_$k.txt 2>&1
  echo "== memcheck $k rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck_$k.txt | tr '\n' ' ')"
done
t grouped_gemm 90 200
MEGAMOE_SWAP_TAIL=1 timeout $(to 90 110) $B/layer_forward ragged_shape small_save_z half_the_experts_empty one_token \
  overlapped_gather_ragged overlapped_gather_masked_save_z qwen3_30b_a3b_t4096 \
  --include-ignored --test-threads=1 > $OUT/r/t_layer_forward_swap.txt 2>&1
echo "== layer_forward (swap on) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_forward_swap.txt)"
grep -E "FAILED|panicked" $OUT/r/t_layer_forward_swap.txt | cut -c1-300 | head -6
MEGAMOE_SWAP_TAIL=1 timeout $(to 110 0) $B/layer_backward small_recompute ragged_shape one_token every_slot \
  half_the_experts qwen3_30b_a3b_t1024_half_empty --include-ignored --test-threads=1 > $OUT/r/t_layer_backward_swap.txt 2>&1
echo "== layer_backward (swap on) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_backward_swap.txt)"
grep -E "FAILED|panicked" $OUT/r/t_layer_backward_swap.txt | cut -c1-300 | head -6
echo "total $(el) s"

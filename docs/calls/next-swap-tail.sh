#!/usr/bin/env bash
# Thirtieth session (not run). The swapped tail tile (docs/wip/swap-ab-tail.md; branch swap-tail = main +
# docs/wip/swap-tail.patch): with MEGAMOE_SWAP_TAIL=1 the plain bf16 M-grouped kernels (grouped_gemm_bf16_st,
# grouped_gemm_bt_bf16_st: the bench's GEMM1 (plain), dh (plain) and dx; in the layer, dx) compute each expert's
# last m-tile (< 128 rows) as C^T with wgmma N = 16, 32, 64, 96 or 128 over the tile's rows, so at most 15 padding
# rows are multiplied instead of 128 - rows. Never run on a GPU: correctness first.
# (1) tests: grouped_gemm's five swap_tail tests (the knob selects the _st kernel; tails at every class bound and
# 300 experts with more tiles than blocks, against the f64 reference and row by row against the ordinary kernel;
# they print how many elements equal the ordinary kernel's bit for bit), compute-sanitizer memcheck of one, grouped_gemm whole;
# layer_backward with MEGAMOE_SWAP_TAIL=1 on a subset (dx through the swapped tiles, against the reference).
# (2) the 30B GEMMs soaked (MEGAMOE_SOAK=3, one MEGAMOE_SEED draw) off, on, off again (the repeat bounds the
# drift). Joules a launch compared by benches/energy.py --compare. (The layer soak, where only dx is covered, waits
# for a win here.)
# Prediction: the padding MMAs of the three covered GEMMs fall from ~64 rows an expert to ~13.5 (~4.6% of their
# MMAs): GEMM1 (plain), dh (plain) and dx 2.5-5% fewer joules a launch (balanced routing, no padding at all, saved
# 4-7%); every other GEMM and the cuBLAS windows level within ~1%. If the
# tensor cores' lower efficiency at small N costs more than the MMAs saved, the covered GEMMs come out level or
# worse: then the premise (padding MMAs cost their share of joules) is wrong for this form too.
# Binaries .dev/b52/st (in the swap-tail worktree: `BDIR=/work/main/.dev/b52 bash docs/calls/2026-12-04c-build.sh st
# grouped_gemm layer_backward`). Command `bash docs/calls/next-swap-tail.sh`, carry [".dev/b52"]; ~8.5 min (565 s).
. "$(dirname "$0")/prelude.sh" b52
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b52/st
t grouped_gemm 90 405 swap_tail --nocapture
grep -hE "swapped tail|rel err|row difference" $OUT/r/t_grouped_gemm.txt | head -24
timeout $(to 40 365) compute-sanitizer --tool memcheck --error-exitcode 3 $B/grouped_gemm kn_swap_tail_matches_the_reference \
  --include-ignored --test-threads=1 > $OUT/r/memcheck.txt 2>&1
echo "== memcheck rc $? at $(el) s: $(grep -E 'ERROR SUMMARY|test result' $OUT/r/memcheck.txt | tr '\n' ' ')"
mv $OUT/r/t_grouped_gemm.txt $OUT/r/t_grouped_gemm_swap.txt
t grouped_gemm 60 305
MEGAMOE_SWAP_TAIL=1 timeout $(to 80 225) $B/layer_backward ragged_shape one_token every_slot half_the_experts \
  --include-ignored --test-threads=1 > $OUT/r/t_layer_backward_swap.txt 2>&1
echo "== layer_backward (swap on) rc $? at $(el) s: $(grep 'test result' $OUT/r/t_layer_backward_swap.txt)"
grep -E "FAILED|panicked" $OUT/r/t_layer_backward_swap.txt | cut -c1-300 | head -6
export MEGAMOE_SEED=20261210
smi_start
bench() { knob_bench MEGAMOE_SWAP_TAIL $3 $1 $2 $4 $5 $6; }  # bench, soak seconds, knob value, output name, want, rest
bench gemm 3 0 gemm_off 75 150
bench gemm 3 1 gemm_on 75 75
bench gemm 3 0 gemm_off2 75 0
smi_stop
alt_of gemm_off gemm_on gemm_off2
energy_of gemm_off gemm_on gemm_off2
python3 ../benches/energy.py --compare $OUT/r energy_gemm_off.txt energy_gemm_on.txt SWAP
python3 ../benches/energy.py --compare $OUT/r energy_gemm_off.txt energy_gemm_off2.txt DRIFT
grep -h "RESULT gemm .*(plain)\|RESULT gemm .*bwd dx" $OUT/r/gemm_on.txt | grep -o "sample rel err [0-9.e+-]*" | head -4
echo "total $(el) s"

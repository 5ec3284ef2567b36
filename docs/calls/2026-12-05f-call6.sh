#!/usr/bin/env bash
# Thirtieth session (not run). Skip-idle alone, soaked for joules: 2026-12-05e soaked it only together with a-maps
# (the pair cost 2-13% more joules on the M-grouped GEMMs, most likely a-maps': a map acquired and fetched at nearly
# every tile; see docs/NOTES.md 2026-12-05e). Branch skip-idle2 = main + docs/wip/skip-idle.patch (`git am -3`);
# `MEGAMOE_SKIP_IDLE=1`: a consumer warpgroup whose 64 rows of a tile all lie past the expert's end issues no wgmma.
# One binary, the knob per process: (1) its tests (grouped_gemm skip_idle_*, layer_backward and layer_forward
# skip_idle_*: bitwise off); (2) the 30B GEMMs soaked (MEGAMOE_SOAK=3, one MEGAMOE_SEED draw) off, on, off again
# (the repeat bounds the drift), then the layer soaked (MEGAMOE_SOAK=4) off and on; nvidia-smi every 100 ms;
# joules a launch per window, compared drift-normalised by each process's cuBLAS window (benches/energy.py --compare).
# Prediction: skip-idle removes about half the padding MMAs (the padding is ~6% of the M-grouped rows at 30B;
# balanced routing, without padding, saved 4-7% J in 2026-12-05 call 3), so the M-grouped GEMMs ~2-3.5% fewer joules
# a launch (GEMM2 and dh least if their tiles are shorter), the weight gradients and cuBLAS windows level within
# ~1%, the step ~1-2%. If on costs joules, as its alternating times did in three earlier forms, retire it.
# Binaries .dev/b51/si (in the skip-idle2 worktree: `BDIR=/work/main/.dev/b51 bash docs/calls/2026-12-04c-build.sh si
# grouped_gemm layer_backward layer_forward`). Command `bash docs/calls/next-skip-idle-soak.sh`, carry [".dev/b51"];
# expected ~8 min (bound 565 s).
. "$(dirname "$0")/prelude.sh" b51
trap 'tar czf $OUT/r.tgz -C $OUT r && rm -rf $OUT/r' EXIT
B=b51/si
t grouped_gemm 40 470 skip_idle
t layer_backward 60 410 skip_idle
t layer_forward 30 380 skip_idle
export MEGAMOE_SEED=20261209
smi_start
bench() { knob_bench MEGAMOE_SKIP_IDLE $3 $1 $2 $4 $5 $6; }  # bench, soak seconds, knob value, output name, want, rest
bench gemm 3 0 gemm_off 80 300
bench gemm 3 1 gemm_on 80 220
bench gemm 3 0 gemm_off2 80 140
bench layer 4 0 layer_off 70 70
bench layer 4 1 layer_on 70 0
smi_stop
alt_of gemm_off gemm_on gemm_off2
for f in layer_off layer_on; do
  [ -f $OUT/r/$f.txt ] && { echo "-- $f"; grep -hE "^RESULT megamoe forward\+backward \(z saved|FAILED|panicked|Error" $OUT/r/$f.txt | cut -c1-200 | head -6; }
done
energy_of gemm_off gemm_on gemm_off2 layer_off layer_on
python3 ../benches/energy.py --compare $OUT/r energy_gemm_off.txt energy_gemm_on.txt SKIP
python3 ../benches/energy.py --compare $OUT/r energy_gemm_off.txt energy_gemm_off2.txt DRIFT
python3 ../benches/energy.py --compare $OUT/r energy_layer_off.txt energy_layer_on.txt SKIP
echo "total $(el) s"
